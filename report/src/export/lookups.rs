//! The export's lookups per event, each an array or a direct-mapped cache in front of a
//! hash: the paths met (a symbol and totals each, found by an fd's path index or an open's
//! string id) and the partitions of each process image.

use bytes::Bytes;
use rustc_hash::FxHashMap;

use super::table::Symbols;
use crate::run::{self, FdIntervals, PathIndex, RunMeta};

/// Per-path totals, as `mlprof summary` counts them.
#[derive(Default)]
pub(super) struct FileTotals {
    pub(super) opens: u64,
    pub(super) calls: u64,
    pub(super) bytes_read: u64,
    pub(super) bytes_written: u64,
    pub(super) total_ns: u64,
}

/// A path met in the run: its string id, its symbol, its totals.
pub(super) struct PathSlot {
    pub(super) id: u64,
    pub(super) symbol: u32,
    pub(super) totals: FileTotals,
}

/// The paths met, by string id and by fd-history path index.
#[derive(Default)]
pub(super) struct Paths {
    pub(super) slots: Vec<PathSlot>,
    by_id: FxHashMap<u64, u32>,
    /// Slot + 1 by [`PathIndex`] (0: not met yet).
    by_index: Vec<u32>,
}

impl Paths {
    /// The slot of path string `id`.
    pub(super) fn of_id(&mut self, meta: &RunMeta, symbols: &mut Symbols, id: u64) -> u32 {
        *self.by_id.entry(id).or_insert_with(|| {
            let text = meta.strings.get(&id).cloned().unwrap_or_default();
            let symbol = symbols.add(Bytes::from(text));
            self.slots.push(PathSlot { id, symbol, totals: FileTotals::default() });
            (self.slots.len() - 1) as u32
        })
    }

    /// The slot of the path of fd-history index `index`.
    #[inline]
    pub(super) fn of_index(
        &mut self,
        meta: &RunMeta,
        symbols: &mut Symbols,
        fds: &FdIntervals,
        index: PathIndex,
    ) -> u32 {
        let at = index as usize;
        if let Some(&slot) = self.by_index.get(at)
            && slot > 0
        {
            return slot - 1;
        }
        let slot = self.of_id(meta, symbols, fds.path_id(index));
        if at >= self.by_index.len() {
            self.by_index.resize(at + 1, 0);
        }
        self.by_index[at] = slot + 1;
        slot
    }

    pub(super) fn at(&mut self, slot: u32) -> (u32, &mut FileTotals) {
        let slot = &mut self.slots[slot as usize];
        (slot.symbol, &mut slot.totals)
    }
}

/// An image's partitions in events, spans and gpu_calls.
pub(super) type Parts = (usize, usize, usize, usize);

/// Slots of [`PidPartitions`]' direct-mapped cache: a merged run's batches interleave the
/// events of many processes (64 ranks and their workers), and a hash lookup at every change
/// of pid was 4 % of an export's CPU.
const PID_CACHE_SLOTS: usize = 256;

/// The partitions of each process image, by pid.
pub(super) struct PidPartitions {
    /// (pid, index in `pids`) by pid modulo the size; `u32::MAX` in an empty slot's pid.
    recent: Box<[(u32, u32); PID_CACHE_SLOTS]>,
    by_pid: FxHashMap<u32, usize>,
    /// Per pid: its images' start times, and their partitions.
    pids: Vec<(Vec<u64>, Vec<Parts>)>,
}

impl Default for PidPartitions {
    fn default() -> Self {
        PidPartitions {
            recent: Box::new([(u32::MAX, 0); PID_CACHE_SLOTS]),
            by_pid: FxHashMap::default(),
            pids: Vec::new(),
        }
    }
}

impl PidPartitions {
    /// The partitions of the image of `pid` running at `time`; `partitions` makes them for
    /// a rank (`none` for an image without one).
    #[inline]
    pub(super) fn get(
        &mut self,
        meta: &RunMeta,
        pid: u32,
        time: u64,
        mut partitions: impl FnMut(&str) -> Parts,
    ) -> Parts {
        let cached = self.recent[pid as usize % PID_CACHE_SLOTS];
        let at = match cached {
            (cached, at) if cached == pid => at as usize,
            _ => {
                let at = *self.by_pid.entry(pid).or_insert_with(|| {
                    let images = meta.images.get(&pid).map_or(&[][..], Vec::as_slice);
                    let rank = |image: Option<&run::Image>| {
                        image
                            .and_then(|i| i.info.rank.as_ref())
                            .map_or("none".to_string(), |r| r.rank.to_string())
                    };
                    let starts = images.iter().map(|i| i.info.start_ns).collect();
                    let mut parts: Vec<_> = images.iter().map(|i| partitions(&rank(Some(i)))).collect();
                    if parts.is_empty() {
                        parts.push(partitions(&rank(None)));
                    }
                    self.pids.push((starts, parts));
                    self.pids.len() - 1
                });
                self.recent[pid as usize % PID_CACHE_SLOTS] = (pid, at as u32);
                at
            }
        };
        let (starts, parts) = &self.pids[at];
        // As `RunMeta::image_at`: the latest image that started before `time`, else the first.
        let image = if starts.len() <= 1 { 0 } else { starts.iter().rposition(|&s| s <= time).unwrap_or(0) };
        parts[image]
    }
}

//! Which file an fd named when: per-(process, fd) open/close intervals, taken from the whole
//! run in the metadata pass, so that every report attributes a read or write to the same path.

use mlprof_format::func::{Api, Class, Func};
use mlprof_format::record::Event;

use super::RunMeta;

const FD_CACHE_SLOTS: usize = 256;

/// An answer of [`FdIntervals::path_of_cached`]: ((pid, fd), after, until, path), valid for
/// times in (after, until].
type FdAnswer = ((u32, i32), u64, u64, Option<u64>);

/// Recent answers of [`FdIntervals::path_of_cached`], by a hash of (pid, fd).
pub struct FdCache {
    slots: Box<[FdAnswer; FD_CACHE_SLOTS]>,
}

impl Default for FdCache {
    fn default() -> Self {
        // An empty interval: no time hits it.
        FdCache { slots: Box::new([((0, -1), u64::MAX, 0, None); FD_CACHE_SLOTS]) }
    }
}

/// Which file each (process, fd) named over time, from the opens and closes of the whole run.
/// Reads and writes are looked up by their start time, not by their place in the file: records
/// of different threads reach the file in drain order, which is not causal when one thread
/// closes an fd and another reuses its number. A fork child inherits its parent's fds as they
/// were when the child started.
#[derive(Default)]
pub struct FdIntervals {
    /// (pid, fd) → (time, path id or 0 for closed), sorted by time. A fast non-cryptographic
    /// hash: this map is looked up once per call in every report.
    changes: rustc_hash::FxHashMap<(u32, i32), Vec<(u64, u64)>>,
}

impl FdIntervals {
    pub(super) fn observe(&mut self, event: &Event) {
        let Some(func) = Func::from_id(event.kind) else { return };
        if func.api() != Api::Libc || event.is_error() || event.fd < 0 {
            return;
        }
        // An fd exists from the end of its open and is gone from the start of its close: the
        // kernel finishes a close before another thread's open can reuse the number, so these
        // two times order them correctly however late either thread read its clock.
        let end = event.start.saturating_add(event.dur);
        match func.class() {
            Class::Open if event.arg2 != 0 => {
                self.changes.entry((event.pid, event.fd)).or_default().push((end, event.arg2))
            }
            Class::Close => self.changes.entry((event.pid, event.fd)).or_default().push((event.start, 0)),
            _ => {}
        }
    }

    pub(super) fn seal(&mut self) {
        for changes in self.changes.values_mut() {
            changes.sort_by_key(|&(time, _)| time);
        }
    }

    /// The path id `fd` of `pid` named at `time`.
    fn lookup(&self, meta: &RunMeta, pid: u32, fd: i32, time: u64, cache: &mut FdCache) -> Option<u64> {
        let slot = &mut cache.slots[(pid as usize ^ (fd as usize).wrapping_mul(31)) % FD_CACHE_SLOTS];
        if slot.0 == (pid, fd) && slot.1 < time && time <= slot.2 {
            return slot.3;
        }
        let (mut pid, mut time) = (pid, time);
        let asked = (pid, fd);
        for _ in 0..16 {
            if let Some(changes) = self.changes.get(&(pid, fd)) {
                // Changes strictly before the call: a close's own change is at its start.
                let at = changes.partition_point(|&(t, _)| t < time);
                if at > 0 {
                    let path = changes[at - 1].1;
                    let path = (path != 0).then_some(path);
                    if (pid, fd) == asked {
                        // The same answer holds until the next change.
                        let until = changes.get(at).map_or(u64::MAX, |c| c.0);
                        *slot = ((pid, fd), changes[at - 1].0, until, path);
                    }
                    return path;
                }
            }
            // Nothing in this process before `time`: a fork child's fd comes from its parent.
            let image = meta.images.get(&pid).and_then(|images| images.first()).filter(|i| i.info.forked)?;
            (pid, time) = (image.info.ppid, image.info.start_ns);
        }
        None
    }

    /// The path id a call's fd refers to (an open names its own path).
    pub fn path_of(&self, meta: &RunMeta, event: &Event) -> Option<u64> {
        self.path_of_cached(meta, event, &mut FdCache::default())
    }

    /// [`FdIntervals::path_of`] for a stream of calls: `cache` remembers, per (pid, fd), the
    /// interval the last answer holds for (most calls on an fd fall in the same one).
    pub fn path_of_cached(&self, meta: &RunMeta, event: &Event, cache: &mut FdCache) -> Option<u64> {
        let func = Func::from_id(event.kind)?;
        if func.api() != Api::Libc {
            // GPU and ITT records keep other things where libc records keep the fd.
            return None;
        }
        match func.class() {
            Class::Open => (event.arg2 != 0).then_some(event.arg2),
            Class::Clock => None,
            Class::Map if event.fd < 0 => None,
            _ if event.fd < 0 => None,
            _ => self.lookup(meta, event.pid, event.fd, event.start, cache),
        }
    }
}

//! Which file an fd named when: per-(process, fd) histories of opens and closes, so that every
//! report attributes a read or write to the same path.
//!
//! Two ways to build them:
//!
//! * **Complete** ([`FdIntervals::observe`] over every event, then [`FdIntervals::seal`]): the
//!   metadata pass of [`super::RunMeta::load`] keeps the whole run's history, 12 bytes per open
//!   and per close. Memory grows with the number of opens; `mlprof summary` uses this.
//! * **Streaming** ([`FdIntervals::streaming`]): a conversion observes each batch of events a
//!   little before it converts it ([`FdIntervals::observe_streaming`]), and each history
//!   forgets what is older than [`KEEP_NS`] before its latest change, keeping the last change
//!   before that and the state at each fork of a child. Memory is bounded by the fds in use,
//!   not by the run. Every answer that may differ from the complete history's is detected —
//!   a change recorded after a call it would have named was looked up, a lookup older than
//!   what was forgotten — and reported by [`FdIntervals::inexact`]: the caller then starts
//!   over with the complete history.
//!
//! A duplicate (`dup`, `dup2`, `dup3`, `fcntl(F_DUPFD*)`) is a change of its new fd to what its
//! source fd named when the duplicating call started, resolved once: complete mode resolves
//! the run's duplicates in [`FdIntervals::seal`], in the order they were made (a duplicate of
//! a duplicate finds its source's change); streaming resolves each as it is observed, looking
//! its source up like a call on it, so that a change of the source recorded later is detected
//! like any other. Either way a duplicate is then one change like an open, 12 bytes.

use std::collections::HashMap;

use mlprof_format::func::{Api, Class, Func};
use mlprof_format::record::Event;
use rustc_hash::FxHashMap;

mod history;

use super::path_table::PathTable;
use super::{Image, RunMeta};
use history::{FdAnswer, History, prune, slot_of};

pub(crate) use history::FdCache;

/// fcntl's commands that duplicate an fd.
const F_DUPFD: u32 = 0;
const F_DUPFD_CLOEXEC: u32 = 1030;

/// How much of its past a streaming history keeps, before its latest change (run time).
/// Records reach the file within a collector pass or two of happening; only a call longer
/// than this whose fd was closed and reused while it ran reaches further back (detected).
pub(crate) const KEEP_NS: u64 = 2_000_000_000;

/// A path's dense index in [`FdIntervals`] (see [`FdIntervals::path_id`]).
pub(crate) type PathIndex = u32;

/// What streaming keeps besides the histories.
struct Streaming {
    /// Start times of each process's forked children, sorted.
    children: FxHashMap<u32, Vec<u64>>,
    /// Why some answer may have differed from the complete history's.
    inexact: Option<String>,
}

/// Which file each (process, fd) named over time, from the opens and closes of the run.
/// Reads and writes are looked up by their start time, not by their place in the file: records
/// of different threads reach the file in drain order, which is not causal when one thread
/// closes an fd and another reuses its number. A fork child inherits its parent's fds as they
/// were when the child started.
#[derive(Default)]
pub(crate) struct FdIntervals {
    /// A fast non-cryptographic hash: looked up on cache misses of every call with an fd.
    histories: FxHashMap<(u32, i32), History>,
    /// Path string ids by index, and the index of each.
    paths: Vec<u64>,
    path_index: PathTable,
    /// Complete mode: the duplicates observed, resolved by [`FdIntervals::seal`].
    duplicates: Vec<Duplicate>,
    streaming: Option<Streaming>,
}

/// A duplicating call: fd `new` of `pid` names, from `end` on, what `source` named at `start`.
#[derive(Clone, Copy)]
struct Duplicate {
    pid: u32,
    source: i32,
    new: i32,
    start: u64,
    end: u64,
}

/// The change `event` makes to its fd: (time, path string id or 0 for a close).
#[inline]
fn change(event: &Event) -> Option<(u64, u64)> {
    let func = Func::from_id(event.kind)?;
    if func.api() != Api::Libc || event.is_error() || event.fd < 0 {
        return None;
    }
    // An fd exists from the end of its open and is gone from the start of its close: the
    // kernel finishes a close before another thread's open can reuse the number, so these
    // two times order them correctly however late either thread read its clock.
    match func.class() {
        Class::Open if event.arg2 != 0 => Some((event.start.saturating_add(event.dur), event.arg2)),
        Class::Close => Some((event.start, 0)),
        _ => None,
    }
}

/// The duplicate `event` makes, if it is a successful `dup`, `dup2`, `dup3` or
/// `fcntl(F_DUPFD*)` onto another fd (its `ret` is the new fd; dup2 onto an open fd replaces
/// it).
#[inline]
fn duplicate(event: &Event) -> Option<Duplicate> {
    let func = Func::from_id(event.kind)?;
    let duplicates = match func {
        Func::Dup | Func::Dup2 | Func::Dup3 => true,
        Func::Fcntl | Func::Fcntl64 => matches!(event.extra, F_DUPFD | F_DUPFD_CLOEXEC),
        _ => false,
    };
    let new = i32::try_from(event.ret).ok()?;
    if !duplicates || event.is_error() || event.fd < 0 || new < 0 || new == event.fd {
        return None;
    }
    let end = event.start.saturating_add(event.dur);
    Some(Duplicate { pid: event.pid, source: event.fd, new, start: event.start, end })
}

impl FdIntervals {
    /// An empty table for a streaming pass over a run whose process images are `images`.
    pub(crate) fn streaming<'a>(images: impl IntoIterator<Item = &'a Image>) -> FdIntervals {
        let mut children: FxHashMap<u32, Vec<u64>> = FxHashMap::default();
        for image in images {
            if image.info.forked {
                children.entry(image.info.ppid).or_default().push(image.info.start_ns);
            }
        }
        for starts in children.values_mut() {
            starts.sort_unstable();
        }
        FdIntervals { streaming: Some(Streaming { children, inexact: None }), ..FdIntervals::default() }
    }

    /// The dense index of path string `id`, giving it one if it has none.
    fn index_path(&mut self, id: u64) -> PathIndex {
        self.path_index.get_or_insert(id, || {
            self.paths.push(id);
            (self.paths.len() - 1) as PathIndex
        })
    }

    /// The index of path string `id`, if an fd was seen naming it.
    pub(crate) fn path_index(&self, id: u64) -> Option<PathIndex> {
        self.path_index.get(id)
    }

    /// Asks the cache for what [`FdIntervals::path_index`] (or an open's indexing) of path
    /// string `id` reads: callers name the path of an event some way ahead.
    #[inline]
    pub(crate) fn prefetch_path(&self, id: u64) {
        self.path_index.prefetch(id);
    }

    /// The string id of path `index`.
    pub(crate) fn path_id(&self, index: PathIndex) -> u64 {
        self.paths[index as usize]
    }

    /// Complete mode: records the change `event` makes (any order; [`FdIntervals::seal`] sorts).
    pub(super) fn observe(&mut self, event: &Event) {
        if let Some((time, path)) = change(event) {
            let path = if path == 0 { 0 } else { self.index_path(path) + 1 };
            let history = self.histories.entry((event.pid, event.fd)).or_default();
            history.times.push(time);
            history.paths.push(path);
        } else if let Some(dup) = duplicate(event) {
            self.duplicates.push(dup);
        }
    }

    /// Complete mode: sorts the histories, then resolves the duplicates (`images`: the run's,
    /// in start order, for fds inherited at a fork).
    pub(super) fn seal(&mut self, images: &HashMap<u32, Vec<Image>>) {
        for history in self.histories.values_mut() {
            if !history.times.is_sorted() {
                let mut order: Vec<(u64, u32)> =
                    history.times.iter().copied().zip(history.paths.iter().copied()).collect();
                order.sort_by_key(|&(time, _)| time);
                (history.times, history.paths) = order.into_iter().unzip();
            }
        }
        // In the order they were made: a duplicate's source change, if itself a duplicate,
        // ended before this one started, so it was resolved first.
        let mut duplicates = std::mem::take(&mut self.duplicates);
        duplicates.sort_by_key(|d| d.start);
        for dup in duplicates {
            let path = self.path_at(images, dup.pid, dup.source, dup.start);
            self.histories.entry((dup.pid, dup.new)).or_default().insert(dup.end, path);
        }
        for history in self.histories.values_mut() {
            history.times.shrink_to_fit();
            history.paths.shrink_to_fit();
        }
    }

    /// Streaming mode: records the change `event` makes, if any, before the calls it names are
    /// looked up; `cache` is the one lookups use. A duplicate's source is looked up at the
    /// duplicating call's start, as a call on it would be (`meta`: the run's processes, for fds
    /// inherited at a fork). Returns the index of the path a successful open gave its fd (what
    /// [`FdIntervals::path_index`] would say of it: a caller can keep it rather than hash the
    /// path again).
    #[inline]
    pub(crate) fn observe_streaming(
        &mut self,
        meta: &RunMeta,
        event: &Event,
        cache: &mut FdCache,
    ) -> Option<PathIndex> {
        if let Some((time, path)) = change(event) {
            let index = (path != 0).then(|| self.index_path(path));
            self.add_change(event.pid, event.fd, time, index.map_or(0, |i| i + 1), cache);
            index
        } else {
            if let Some(dup) = duplicate(event) {
                let (path, _, _) = self.lookup(meta, dup.pid, dup.source, dup.start);
                self.add_change(dup.pid, dup.new, dup.end, path, cache);
            }
            None
        }
    }

    /// Streaming: fd `fd` of `pid` names path index + 1 `path` (0: closed) from `time` on.
    fn add_change(&mut self, pid: u32, fd: i32, time: u64, path: u32, cache: &mut FdCache) {
        let Some(streaming) = self.streaming.as_mut() else { return };
        let history = self.histories.entry((pid, fd)).or_default();
        let slot = &mut cache.slots[slot_of(pid, fd)];
        if slot.key == (pid, fd) {
            // The cached answer ends here; what it was used for stays with the history.
            history.latest_lookup = history.latest_lookup.max(slot.latest);
            *slot = FdAnswer { after: u64::MAX, until: 0, latest: 0, ..*slot };
        }
        if time < history.latest_lookup {
            // A call that started after it was looked up without it.
            streaming.inexact.get_or_insert_with(|| {
                format!(
                    "fd {fd} of pid {pid} changed at {time} ns, but that change was recorded after a \
                     call that started later"
                )
            });
        }
        history.insert(time, path);
        if history.times.len() as u32 >= history.prune_at.max(16) {
            let children = streaming.children.get(&pid).map_or(&[][..], Vec::as_slice);
            let horizon = history.times.last().map_or(0, |&t| t.saturating_sub(KEEP_NS));
            prune(history, horizon, children);
        }
    }

    /// Streaming mode: why an answer may have differed from the complete history's.
    pub(crate) fn inexact(&self) -> Option<&str> {
        self.streaming.as_ref().and_then(|s| s.inexact.as_deref())
    }

    /// Changes kept, over all fds (for tests and memory checks).
    #[cfg(test)]
    pub(crate) fn changes_kept(&self) -> usize {
        self.histories.values().map(|h| h.times.len()).sum()
    }

    /// The path index + 1 (0: none) `fd` of `pid` named at `time`, and the interval of times
    /// the answer holds for.
    fn lookup(&mut self, meta: &RunMeta, pid: u32, fd: i32, time: u64) -> (u32, u64, u64) {
        let streaming = self.streaming.is_some();
        let (mut owner, mut at_time) = (pid, time);
        let mut own_first = None;
        for _ in 0..16 {
            let history = match self.histories.get_mut(&(owner, fd)) {
                Some(history) => Some(history),
                // A later change of this fd must know it was looked up.
                None if streaming && owner == pid => Some(self.histories.entry((owner, fd)).or_default()),
                None => None,
            };
            if let Some(history) = history {
                history.latest_lookup = history.latest_lookup.max(at_time);
                // Changes strictly before the call: a close's own change is at its start.
                let at = history.before_near(at_time, history.cursor);
                history.cursor = at;
                // At a fork the parent's state was kept; elsewhere a forgotten change may be it.
                let forgotten = at_time <= history.floor && owner == pid;
                if owner == pid {
                    own_first = history.times.first().copied();
                }
                if at > 0 {
                    let path = history.paths[at - 1];
                    let interval = if owner == pid {
                        // The same answer holds until the next change.
                        (history.times[at - 1], history.times.get(at).copied().unwrap_or(u64::MAX))
                    } else {
                        (0, own_first.unwrap_or(u64::MAX))
                    };
                    if forgotten {
                        self.miss(pid, fd, time);
                    }
                    return (path, interval.0, interval.1);
                }
                if forgotten {
                    self.miss(pid, fd, time);
                }
            }
            // Nothing in this process before `time`: a fork child's fd comes from its parent.
            let Some(image) =
                meta.images.get(&owner).and_then(|images| images.first()).filter(|i| i.info.forked)
            else {
                break;
            };
            (owner, at_time) = (image.info.ppid, image.info.start_ns);
        }
        // Nothing before: the answer holds until the process's own first change.
        (0, 0, own_first.unwrap_or(u64::MAX))
    }

    #[cold]
    fn miss(&mut self, pid: u32, fd: i32, time: u64) {
        if let Some(streaming) = self.streaming.as_mut() {
            streaming.inexact.get_or_insert_with(|| {
                format!("fd {fd} of pid {pid} looked up at {time} ns, before the history kept")
            });
        }
    }

    /// The path index `fd` of `pid` named at `time`, remembering the answer in `cache` for
    /// the calls that follow (most calls on an fd fall in the same interval).
    #[inline]
    pub(crate) fn lookup_cached(
        &mut self,
        meta: &RunMeta,
        pid: u32,
        fd: i32,
        time: u64,
        cache: &mut FdCache,
    ) -> Option<PathIndex> {
        let slot = &mut cache.slots[slot_of(pid, fd)];
        if slot.key == (pid, fd) && slot.after < time && time <= slot.until {
            slot.latest = slot.latest.max(time);
            return slot.path.checked_sub(1);
        }
        let old = *slot;
        if old.latest > 0
            && let Some(history) = self.histories.get_mut(&old.key)
        {
            history.latest_lookup = history.latest_lookup.max(old.latest);
        }
        let (path, after, until) = self.lookup(meta, pid, fd, time);
        cache.slots[slot_of(pid, fd)] = FdAnswer { key: (pid, fd), after, until, path, latest: time };
        path.checked_sub(1)
    }

    /// The path string id a call refers to, from a complete history: a call with a path
    /// argument names it (an open too), a call on an fd what the fd named when it started.
    pub(crate) fn path_of(&self, meta: &RunMeta, event: &Event) -> Option<u64> {
        let func = Func::from_id(event.kind)?;
        if func.api() != Api::Libc {
            // GPU and ITT records keep other things where libc records keep the fd.
            return None;
        }
        match func.class() {
            _ if func.has_path() && event.arg2 != 0 => Some(event.arg2),
            Class::Open | Class::Clock | Class::Syscall | Class::Load => None,
            _ if event.fd < 0 => None,
            _ => self.fd_path(meta, event.pid, event.fd, event.start),
        }
    }

    /// The path string id `fd` of `pid` named at `time`, from a complete history.
    fn fd_path(&self, meta: &RunMeta, pid: u32, fd: i32, time: u64) -> Option<u64> {
        let path = self.path_at(&meta.images, pid, fd, time);
        path.checked_sub(1).and_then(|i| self.paths.get(i as usize).copied())
    }

    /// The path index + 1 (0: none) `fd` of `pid` named at `time`, from a complete history
    /// (a fork child's fds are its parent's at its start).
    fn path_at(&self, images: &HashMap<u32, Vec<Image>>, pid: u32, fd: i32, time: u64) -> u32 {
        let (mut pid, mut time) = (pid, time);
        for _ in 0..16 {
            if let Some(history) = self.histories.get(&(pid, fd)) {
                let at = history.before(time);
                if at > 0 {
                    return history.paths[at - 1];
                }
            }
            let Some(image) = images.get(&pid).and_then(|images| images.first()).filter(|i| i.info.forked)
            else {
                return 0;
            };
            (pid, time) = (image.info.ppid, image.info.start_ns);
        }
        0
    }

    /// The path a call's own path argument names, made absolute when it is relative to an `*at`
    /// call's directory fd (`fstatat(dfd, "f0")` → the directory's path + `/f0`), from a
    /// complete history; `None` for an absolute path, or a directory fd that names nothing
    /// known. `name` is the call's own path string.
    pub(crate) fn resolve_relative(&self, meta: &RunMeta, event: &Event, name: &str) -> Option<String> {
        if name.starts_with('/') || event.fd < 0 {
            return None;
        }
        let dir = self.fd_path(meta, event.pid, event.fd, event.start)?;
        let dir = meta.strings.get(&dir)?;
        Some(format!("{}/{name}", dir.trim_end_matches('/')))
    }
}

#[cfg(test)]
mod tests;

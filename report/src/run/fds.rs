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

use super::path_table::PathTable;

use super::{Image, RunMeta};

const FD_CACHE_SLOTS: usize = 256;

/// fcntl's commands that duplicate an fd.
const F_DUPFD: u32 = 0;
const F_DUPFD_CLOEXEC: u32 = 1030;

/// How much of its past a streaming history keeps, before its latest change (run time).
/// Records reach the file within a collector pass or two of happening; only a call longer
/// than this whose fd was closed and reused while it ran reaches further back (detected).
pub const KEEP_NS: u64 = 2_000_000_000;

/// A path's dense index in [`FdIntervals`] (see [`FdIntervals::path_id`]).
pub type PathIndex = u32;

/// An answer of [`FdIntervals::lookup_cached`], valid for times in (after, until].
#[derive(Clone, Copy)]
struct FdAnswer {
    key: (u32, i32),
    after: u64,
    until: u64,
    /// Path index + 1, or 0.
    path: u32,
    /// The latest time this answer was given for (streaming: merged into the history when the
    /// answer is dropped).
    latest: u64,
}

/// Recent answers of [`FdIntervals::lookup_cached`], by a hash of (pid, fd).
pub struct FdCache {
    slots: Box<[FdAnswer; FD_CACHE_SLOTS]>,
}

impl Default for FdCache {
    fn default() -> Self {
        // An empty interval: no time hits it.
        let empty = FdAnswer { key: (0, -1), after: u64::MAX, until: 0, path: 0, latest: 0 };
        FdCache { slots: Box::new([empty; FD_CACHE_SLOTS]) }
    }
}

#[inline]
fn slot_of(pid: u32, fd: i32) -> usize {
    (pid as usize ^ (fd as usize).wrapping_mul(31)) % FD_CACHE_SLOTS
}

/// The changes of one (process, fd), sorted by time: struct of arrays, 12 bytes a change.
#[derive(Default)]
struct History {
    /// An open's end, a close's start.
    times: Vec<u64>,
    /// Path index + 1 of an open; 0 for a close.
    paths: Vec<u32>,
    /// Streaming: changes before this time were forgotten, so a lookup at or before it may
    /// miss one (not at a fork of a child, whose state is kept).
    floor: u64,
    /// Streaming: the latest time a lookup was answered from this history (cached answers
    /// are merged when they leave the cache).
    latest_lookup: u64,
    /// Streaming: length at which the history is pruned next.
    prune_at: u32,
    /// Where the last lookup's answer was ([`History::before_near`] starts there): the next
    /// lookup of the same fd is a change or two further. Only a hint.
    cursor: usize,
}

impl History {
    fn insert(&mut self, time: u64, path: u32) {
        // Changes come nearly in time order (the file is in drain order): mostly at the end.
        if self.times.last().is_none_or(|&last| last <= time) {
            self.times.push(time);
            self.paths.push(path);
            return;
        }
        let at = self.times.len() - self.times.iter().rev().take_while(|&&t| t > time).count();
        self.times.insert(at, time);
        self.paths.insert(at, path);
    }

    /// Index of the first change at or after `time`.
    #[inline]
    fn before(&self, time: u64) -> usize {
        self.times.partition_point(|&t| t < time)
    }

    /// [`History::before`], searched from `hint` outwards (galloping): a streaming history
    /// holds thousands of changes of a busy fd, and a binary search over them all is a cache
    /// miss a step, where the answer is usually within a few entries of the last one.
    #[inline]
    fn before_near(&self, time: u64, hint: usize) -> usize {
        let times = &self.times[..];
        let n = times.len();
        let h = hint.min(n);
        if h < n && times[h] < time {
            // After `h`: probe h + 1, h + 2, h + 4... until a change at or after `time`.
            let (mut lo, mut step) = (h + 1, 1);
            loop {
                let probe = h + step;
                if probe >= n {
                    return lo + times[lo..].partition_point(|&t| t < time);
                }
                if times[probe] >= time {
                    return lo + times[lo..probe].partition_point(|&t| t < time);
                }
                (lo, step) = (probe + 1, step * 2);
            }
        }
        // At or before `h` (times[h] >= time, or h == n): probe h - 1, h - 2, h - 4...
        let (mut hi, mut step) = (h, 1);
        while hi > 0 {
            let probe = hi.saturating_sub(step);
            if times[probe] < time {
                return probe + 1 + times[probe + 1..hi].partition_point(|&t| t < time);
            }
            (hi, step) = (probe, step * 2);
        }
        0
    }
}

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
pub struct FdIntervals {
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
    pub fn streaming<'a>(images: impl IntoIterator<Item = &'a Image>) -> FdIntervals {
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
    pub fn path_index(&self, id: u64) -> Option<PathIndex> {
        self.path_index.get(id)
    }

    /// Asks the cache for what [`FdIntervals::path_index`] (or an open's indexing) of path
    /// string `id` reads: callers name the path of an event some way ahead.
    #[inline]
    pub fn prefetch_path(&self, id: u64) {
        self.path_index.prefetch(id);
    }

    /// The string id of path `index`.
    pub fn path_id(&self, index: PathIndex) -> u64 {
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
    pub fn observe_streaming(
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
    pub fn inexact(&self) -> Option<&str> {
        self.streaming.as_ref().and_then(|s| s.inexact.as_deref())
    }

    /// Changes kept, over all fds (for tests and memory checks).
    pub fn changes_kept(&self) -> usize {
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
    pub fn lookup_cached(
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
    pub fn path_of(&self, meta: &RunMeta, event: &Event) -> Option<u64> {
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
    pub fn resolve_relative(&self, meta: &RunMeta, event: &Event, name: &str) -> Option<String> {
        if name.starts_with('/') || event.fd < 0 {
            return None;
        }
        let dir = self.fd_path(meta, event.pid, event.fd, event.start)?;
        let dir = meta.strings.get(&dir)?;
        Some(format!("{}/{name}", dir.trim_end_matches('/')))
    }
}

/// Forgets the changes of `history` that no lookup at or after `horizon` needs, nor a fork of
/// a child (started at `children`, sorted): keeps every change from `horizon` on, the last
/// before it, and the last before each child's start.
fn prune(history: &mut History, horizon: u64, children: &[u64]) {
    let cut = history.before(horizon);
    if cut > 1 {
        let last_before = history.times[cut - 1];
        let mut kept = 0;
        let mut child = children.partition_point(|&c| c <= history.times[0]);
        for i in 0..history.times.len() {
            let next = history.times.get(i + 1).copied().unwrap_or(u64::MAX);
            // Change i is the last before child start c when times[i] < c <= next.
            let mut for_child = false;
            while child < children.len() && children[child] <= next {
                for_child |= history.times[i] < children[child];
                child += 1;
            }
            if i + 1 >= cut || for_child {
                history.times[kept] = history.times[i];
                history.paths[kept] = history.paths[i];
                kept += 1;
            }
        }
        if kept < history.times.len() {
            // Lookups after the last change before the horizon see everything they need.
            history.floor = history.floor.max(last_before);
        }
        history.times.truncate(kept);
        history.paths.truncate(kept);
    }
    history.prune_at = (2 * history.times.len()).max(16) as u32;
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlprof_format::runfile::ProcessInfo;

    fn open(pid: u32, fd: i32, end: u64, path: u64) -> Event {
        let kind = Func::Open64 as u16;
        Event {
            kind,
            pid,
            tid: pid,
            fd,
            start: end - 10,
            dur: 10,
            ret: fd.into(),
            arg2: path,
            ..Event::default()
        }
    }

    fn close(pid: u32, fd: i32, start: u64) -> Event {
        Event { kind: Func::Close as u16, pid, tid: pid, fd, start, dur: 5, ..Event::default() }
    }

    /// Pid 10, and pid 11 forked from it at `fork`.
    fn meta(fork: u64) -> RunMeta {
        let mut meta = RunMeta::default();
        for (pid, ppid, forked, start_ns) in [(10, 1, false, 0), (11, 10, true, fork)] {
            let info = ProcessInfo { pid, ppid, argv: vec![], start_ns, forked, ..ProcessInfo::default() };
            meta.images.insert(pid, vec![Image { info, exit: None }]);
        }
        meta
    }

    fn path(fds: &mut FdIntervals, meta: &RunMeta, pid: u32, time: u64, cache: &mut FdCache) -> Option<u64> {
        fds.lookup_cached(meta, pid, 3, time, cache).map(|index| fds.path_id(index))
    }

    #[test]
    fn streaming_answers_like_the_complete_history() {
        let meta = meta(250);
        let mut fds = FdIntervals::streaming(meta.images.values().flatten());
        let mut cache = FdCache::default();
        fds.observe_streaming(&meta, &open(10, 3, 200, 77), &mut cache);
        assert_eq!(path(&mut fds, &meta, 10, 300, &mut cache), Some(77));
        fds.observe_streaming(&meta, &close(10, 3, 400), &mut cache);
        // The close forgot the cached answer.
        assert_eq!(path(&mut fds, &meta, 10, 450, &mut cache), None);
        assert_eq!(path(&mut fds, &meta, 10, 350, &mut cache), Some(77));
        // The child inherited the fd open at its fork.
        assert_eq!(path(&mut fds, &meta, 11, 500, &mut cache), Some(77));
        assert_eq!(fds.inexact(), None);
    }

    #[test]
    fn a_change_recorded_after_a_call_it_names_is_detected() {
        let meta = meta(250);
        let mut fds = FdIntervals::streaming(meta.images.values().flatten());
        let mut cache = FdCache::default();
        assert_eq!(path(&mut fds, &meta, 10, 500, &mut cache), None);
        // Later changes are fine...
        fds.observe_streaming(&meta, &open(10, 3, 600, 77), &mut cache);
        assert_eq!(fds.inexact(), None);
        // ...an earlier one is not: the call at 500 was converted without it.
        fds.observe_streaming(&meta, &open(10, 3, 200, 78), &mut cache);
        assert!(fds.inexact().is_some_and(|why| why.contains("recorded after")), "{:?}", fds.inexact());
    }

    #[test]
    fn history_forgotten_is_detected_but_forks_keep_theirs() {
        let meta = meta(1_200_000);
        let mut fds = FdIntervals::streaming(meta.images.values().flatten());
        let mut cache = FdCache::default();
        // An open every ms for 5 s, closed half a ms later; path = the open's ms.
        let ms = 1_000_000;
        for i in 1..5_000 {
            fds.observe_streaming(&meta, &open(10, 3, i * ms, i), &mut cache);
            fds.observe_streaming(&meta, &close(10, 3, i * ms + ms / 2), &mut cache);
            if i % 100 == 0 {
                // Calls on the fd keep up with the opens.
                assert_eq!(path(&mut fds, &meta, 10, i * ms + 1, &mut cache), Some(i));
            }
        }
        assert!(fds.changes_kept() < 2 * 2 * (KEEP_NS / ms) as usize, "{}", fds.changes_kept());
        assert_eq!(fds.inexact(), None);
        // The child, forked at 1.2 ms while the first file was open, reads it at 4.9 s: the
        // parent's state at the fork was kept, the rest of that time forgotten.
        assert_eq!(path(&mut fds, &meta, 11, 4_900 * ms, &mut cache), Some(1));
        assert_eq!(fds.inexact(), None);
        // A call of the parent from 4 s before its latest change is not answerable exactly.
        path(&mut fds, &meta, 10, 900 * ms + 1, &mut cache);
        assert!(
            fds.inexact().is_some_and(|why| why.contains("before the history kept")),
            "{:?}",
            fds.inexact()
        );
    }

    /// `func` duplicating fd `source` of `pid` onto `new`, from `start` to `start + 10`.
    fn dup(func: Func, pid: u32, source: i32, new: i32, start: u64) -> Event {
        let extra = if matches!(func, Func::Fcntl) { F_DUPFD_CLOEXEC } else { 0 };
        Event {
            kind: func as u16,
            pid,
            tid: pid,
            fd: source,
            start,
            dur: 10,
            ret: new.into(),
            extra,
            ..Event::default()
        }
    }

    fn fd_path(fds: &mut FdIntervals, meta: &RunMeta, pid: u32, fd: i32, time: u64) -> Option<u64> {
        let mut cache = FdCache::default();
        fds.lookup_cached(meta, pid, fd, time, &mut cache).map(|index| fds.path_id(index))
    }

    #[test]
    fn duplicates_name_their_source_file_in_both_modes() {
        let meta = meta(450);
        // 3 opens 77 (ends 100); dup(3) → 4 at 200; fcntl(4, F_DUPFD_CLOEXEC) → 5 at 300;
        // 3 closed at 400 and reopened as 78 (ends 500); dup2(3, 4) at 600 replaces 4;
        // a failed dup and a non-duplicating fcntl change nothing.
        let mut failed = dup(Func::Dup, 10, 9, 6, 250);
        failed.ret = -1;
        failed.errno = 9;
        let mut getfl = dup(Func::Fcntl, 10, 3, 6, 260);
        getfl.extra = 3;
        let events = [
            open(10, 3, 100, 77),
            dup(Func::Dup, 10, 3, 4, 200),
            dup(Func::Fcntl, 10, 4, 5, 300),
            close(10, 3, 400),
            open(10, 3, 500, 78),
            dup(Func::Dup2, 10, 3, 4, 600),
            failed,
            getfl,
        ];
        let expected = [
            (10, 4, 150, None),
            (10, 4, 250, Some(77)),
            (10, 5, 350, Some(77)),
            (10, 4, 550, Some(77)),
            (10, 4, 650, Some(78)),
            (10, 5, 650, Some(77)),
            (10, 6, 650, None),
            // The child, forked at 450, inherited 4 and 5 naming 77.
            (11, 4, 700, Some(77)),
        ];
        // Complete: any order of observation.
        let mut complete = FdIntervals::default();
        for event in events.iter().rev() {
            complete.observe(event);
        }
        complete.seal(&meta.images);
        for &(pid, fd, time, path) in &expected {
            assert_eq!(
                fd_path(&mut complete, &meta, pid, fd, time),
                path,
                "complete: fd {fd} of {pid} at {time}"
            );
            let call = Event { kind: Func::Write as u16, pid, tid: pid, fd, start: time, ..Event::default() };
            assert_eq!(complete.path_of(&meta, &call), path, "path_of: fd {fd} of {pid} at {time}");
        }
        // Streaming: in time order, the same answers.
        let mut fds = FdIntervals::streaming(meta.images.values().flatten());
        let mut cache = FdCache::default();
        for event in &events {
            fds.observe_streaming(&meta, event, &mut cache);
        }
        for &(pid, fd, time, path) in &expected {
            assert_eq!(
                fd_path(&mut fds, &meta, pid, fd, time),
                path,
                "streaming: fd {fd} of {pid} at {time}"
            );
        }
        assert_eq!(fds.inexact(), None);
        assert_eq!(fds.changes_kept(), complete.changes_kept());
        assert_eq!(fds.changes_kept(), 6);
    }

    #[test]
    fn a_source_change_recorded_after_its_duplicate_is_detected() {
        let meta = meta(1_000);
        let mut fds = FdIntervals::streaming(meta.images.values().flatten());
        let mut cache = FdCache::default();
        fds.observe_streaming(&meta, &dup(Func::Dup, 10, 3, 4, 200), &mut cache);
        assert_eq!(fds.inexact(), None);
        // The open the duplicate copied reached the file after it.
        fds.observe_streaming(&meta, &open(10, 3, 100, 77), &mut cache);
        assert!(fds.inexact().is_some_and(|why| why.contains("recorded after")), "{:?}", fds.inexact());
    }

    #[test]
    fn a_relative_path_joins_its_directory_fd() {
        let mut meta = meta(1_000);
        meta.strings.insert(77, "/data/d/".into());
        let mut fds = FdIntervals::default();
        fds.observe(&open(10, 3, 100, 77));
        fds.observe(&dup(Func::Dup, 10, 3, 7, 200));
        fds.seal(&meta.images);
        let at = |fd: i32| Event {
            kind: Func::Fstatat as u16,
            pid: 10,
            tid: 10,
            fd,
            start: 300,
            arg2: 5,
            ..Event::default()
        };
        assert_eq!(fds.resolve_relative(&meta, &at(7), "f0").as_deref(), Some("/data/d/f0"));
        assert_eq!(fds.resolve_relative(&meta, &at(7), "/abs"), None);
        assert_eq!(fds.resolve_relative(&meta, &at(8), "f0"), None);
        assert_eq!(fds.resolve_relative(&meta, &at(-100), "f0"), None);
    }

    fn history(times: &[u64]) -> History {
        History { times: times.to_vec(), paths: (1..=times.len() as u32).collect(), ..History::default() }
    }

    #[test]
    fn a_search_from_a_hint_finds_what_a_binary_search_finds() {
        // Sorted, with repeated times, of every length up to 40; every hint, every time.
        for n in 0..40u64 {
            let times: Vec<u64> = (0..n).map(|i| 10 + i / 3 * 10).collect();
            let h = history(&times);
            for hint in 0..=n as usize + 2 {
                for time in 0..(n * 4 + 30) {
                    assert_eq!(
                        h.before_near(time, hint),
                        h.before(time),
                        "{times:?} hint {hint} time {time}"
                    );
                }
            }
        }
    }

    #[test]
    fn pruning_keeps_the_horizon_and_every_fork() {
        let mut h = history(&[10, 20, 30, 40, 50, 60, 70]);
        // Children forked at 25 (needs 20), 31 (needs 30) and 32 (needs 30 too).
        prune(&mut h, 55, &[25, 31, 32]);
        assert_eq!(h.times, [20, 30, 50, 60, 70]);
        assert_eq!(h.paths, [2, 3, 5, 6, 7]);
        assert_eq!(h.floor, 50);
        // A lookup at a child's start finds what the complete history would.
        assert_eq!(h.paths[h.before(25) - 1], 2);
        assert_eq!(h.paths[h.before(32) - 1], 3);
    }

    #[test]
    fn out_of_order_changes_are_inserted_in_place() {
        let mut h = history(&[10, 30]);
        h.insert(20, 9);
        h.insert(40, 8);
        assert_eq!((h.times.as_slice(), h.paths.as_slice()), (&[10, 20, 30, 40][..], &[1, 9, 2, 8][..]));
    }
}

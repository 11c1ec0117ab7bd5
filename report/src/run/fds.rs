//! Which file an fd named when: per-(process, fd) open/close intervals, taken from the whole
//! run in the metadata pass, so that every report attributes a read or write to the same path.

use mlprof_format::func::{Api, Class, Func};
use mlprof_format::record::Event;

use super::RunMeta;

const FD_CACHE_SLOTS: usize = 256;

/// An answer of [`FdIntervals::path_of_cached`]: ((pid, fd), after, until, path), valid for
/// times in (after, until].
type FdAnswer = ((u32, i32), u64, u64, Option<u64>);

/// What an fd became at a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Named {
    /// Opened: the path id.
    Path(u64),
    /// Closed.
    Closed,
    /// A duplicate (dup, dup2, dup3, fcntl F_DUPFD) of this fd of the same process, as it was at
    /// this time (the duplicating call's start).
    Dup(i32, u64),
}

/// fcntl's commands that duplicate an fd.
const F_DUPFD: u32 = 0;
const F_DUPFD_CLOEXEC: u32 = 1030;

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
    /// (pid, fd) → (time, what it became), sorted by time. A fast non-cryptographic hash:
    /// this map is looked up once per call in every report.
    changes: rustc_hash::FxHashMap<(u32, i32), Vec<(u64, Named)>>,
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
                self.changes.entry((event.pid, event.fd)).or_default().push((end, Named::Path(event.arg2)))
            }
            Class::Close => {
                self.changes.entry((event.pid, event.fd)).or_default().push((event.start, Named::Closed))
            }
            // A duplicate names what its source named (dup2 onto an open fd replaces it).
            Class::Fd if duplicates(func, event) && event.ret >= 0 && event.ret != event.fd as i64 => {
                let copy = Named::Dup(event.fd, event.start);
                self.changes.entry((event.pid, event.ret as i32)).or_default().push((end, copy))
            }
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
        let index = (pid as usize ^ (fd as usize).wrapping_mul(31)) % FD_CACHE_SLOTS;
        let slot = cache.slots[index];
        if slot.0 == (pid, fd) && slot.1 < time && time <= slot.2 {
            return slot.3;
        }
        let (path, valid) = self.lookup_uncached(meta, pid, fd, time, 0);
        if let Some((after, until)) = valid {
            cache.slots[index] = ((pid, fd), after, until, path);
        }
        path
    }

    /// What `fd` of `pid` named at `time`, and the interval (after, until] the same answer holds
    /// for when that comes from `pid`'s own changes. `depth` bounds chains of duplicates (a
    /// duplicate's source is looked up as it was when the duplicate was made: never a cycle,
    /// since that is earlier, but bounded all the same) and of fork parents.
    fn lookup_uncached(
        &self,
        meta: &RunMeta,
        pid: u32,
        fd: i32,
        time: u64,
        depth: u32,
    ) -> (Option<u64>, Option<(u64, u64)>) {
        let asked = pid;
        let (mut pid, mut time) = (pid, time);
        for _ in 0..16 {
            if let Some(changes) = self.changes.get(&(pid, fd)) {
                // Changes strictly before the call: a close's own change is at its start.
                let at = changes.partition_point(|&(t, _)| t < time);
                if at > 0 {
                    let (changed, named) = changes[at - 1];
                    let path = match named {
                        Named::Path(path) => Some(path),
                        Named::Closed => None,
                        Named::Dup(_, _) if depth >= 16 => None,
                        Named::Dup(source, made) => {
                            self.lookup_uncached(meta, pid, source, made, depth + 1).0
                        }
                    };
                    // The same answer holds until the next change.
                    let valid = (pid == asked).then(|| (changed, changes.get(at).map_or(u64::MAX, |c| c.0)));
                    return (path, valid);
                }
            }
            // Nothing in this process before `time`: a fork child's fd comes from its parent.
            let Some(image) =
                meta.images.get(&pid).and_then(|images| images.first()).filter(|i| i.info.forked)
            else {
                return (None, None);
            };
            (pid, time) = (image.info.ppid, image.info.start_ns);
        }
        (None, None)
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
            _ if func.has_path() && event.arg2 != 0 => Some(event.arg2),
            Class::Open | Class::Clock | Class::Syscall | Class::Load => None,
            _ if event.fd < 0 => None,
            _ => self.lookup(meta, event.pid, event.fd, event.start, cache),
        }
    }

    /// The path a call's own path argument names, made absolute when it is relative to an `*at`
    /// call's directory fd (`fstatat(dfd, "f0")` → the directory's path + `/f0`); `None` for
    /// calls without a path argument. `name` is the call's own path string.
    pub fn resolve_relative(
        &self,
        meta: &RunMeta,
        event: &Event,
        name: &str,
        cache: &mut FdCache,
    ) -> Option<String> {
        if name.starts_with('/') || event.fd < 0 {
            return None;
        }
        let dir = self.lookup(meta, event.pid, event.fd, event.start, cache)?;
        let dir = meta.strings.get(&dir)?;
        Some(format!("{}/{name}", dir.trim_end_matches('/')))
    }
}

/// Whether a descriptor call made a duplicate (its `ret` is the new fd).
fn duplicates(func: Func, event: &Event) -> bool {
    match func {
        Func::Dup | Func::Dup2 | Func::Dup3 => true,
        Func::Fcntl | Func::Fcntl64 => matches!(event.extra, F_DUPFD | F_DUPFD_CLOEXEC),
        _ => false,
    }
}

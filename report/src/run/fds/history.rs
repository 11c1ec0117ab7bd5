//! One (process, fd)'s history of changes, and the cache of recent lookups in front of all of
//! them: the data structures of [`super::FdIntervals`], with the searches and the pruning a
//! streaming history needs.

/// Slots of [`FdCache`].
const FD_CACHE_SLOTS: usize = 256;

/// An answer of [`super::FdIntervals::lookup_cached`], valid for times in (after, until].
#[derive(Clone, Copy)]
pub(super) struct FdAnswer {
    pub(super) key: (u32, i32),
    pub(super) after: u64,
    pub(super) until: u64,
    /// Path index + 1, or 0.
    pub(super) path: u32,
    /// The latest time this answer was given for (streaming: merged into the history when the
    /// answer is dropped).
    pub(super) latest: u64,
}

/// Recent answers of [`super::FdIntervals::lookup_cached`], by a hash of (pid, fd).
pub(crate) struct FdCache {
    pub(super) slots: Box<[FdAnswer; FD_CACHE_SLOTS]>,
}

impl Default for FdCache {
    fn default() -> Self {
        // An empty interval: no time hits it.
        let empty = FdAnswer { key: (0, -1), after: u64::MAX, until: 0, path: 0, latest: 0 };
        FdCache { slots: Box::new([empty; FD_CACHE_SLOTS]) }
    }
}

#[inline]
pub(super) fn slot_of(pid: u32, fd: i32) -> usize {
    (pid as usize ^ (fd as usize).wrapping_mul(31)) % FD_CACHE_SLOTS
}

/// The changes of one (process, fd), sorted by time: struct of arrays, 12 bytes a change.
#[derive(Default)]
pub(super) struct History {
    /// An open's end, a close's start.
    pub(super) times: Vec<u64>,
    /// Path index + 1 of an open; 0 for a close.
    pub(super) paths: Vec<u32>,
    /// Streaming: changes before this time were forgotten, so a lookup at or before it may
    /// miss one (not at a fork of a child, whose state is kept).
    pub(super) floor: u64,
    /// Streaming: the latest time a lookup was answered from this history (cached answers
    /// are merged when they leave the cache).
    pub(super) latest_lookup: u64,
    /// Streaming: length at which the history is pruned next.
    pub(super) prune_at: u32,
    /// Where the last lookup's answer was ([`History::before_near`] starts there): the next
    /// lookup of the same fd is a change or two further. Only a hint.
    pub(super) cursor: usize,
}

impl History {
    pub(super) fn insert(&mut self, time: u64, path: u32) {
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
    pub(super) fn before(&self, time: u64) -> usize {
        self.times.partition_point(|&t| t < time)
    }

    /// [`History::before`], searched from `hint` outwards (galloping): a streaming history
    /// holds thousands of changes of a busy fd, and a binary search over them all is a cache
    /// miss a step, where the answer is usually within a few entries of the last one.
    #[inline]
    pub(super) fn before_near(&self, time: u64, hint: usize) -> usize {
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

/// Forgets the changes of `history` that no lookup at or after `horizon` needs, nor a fork of
/// a child (started at `children`, sorted): keeps every change from `horizon` on, the last
/// before it, and the last before each child's start.
pub(super) fn prune(history: &mut History, horizon: u64, children: &[u64]) {
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

//! Streaming fd histories held against the complete ones: changes recorded late, history
//! forgotten, duplicates, relative paths, and the history's own searches.

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
    assert!(fds.inexact().is_some_and(|why| why.contains("before the history kept")), "{:?}", fds.inexact());
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
        assert_eq!(fd_path(&mut fds, &meta, pid, fd, time), path, "streaming: fd {fd} of {pid} at {time}");
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
                assert_eq!(h.before_near(time, hint), h.before(time), "{times:?} hint {hint} time {time}");
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

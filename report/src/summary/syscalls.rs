//! The strace-shaped view (`mlprof summary --syscalls`): the run's calls as the system calls
//! they make, so the table reads like `strace -f -c`.
//!
//! A process in complete mode (`mlprof-collect --all-syscalls`: trapped system call records,
//! see README "System calls") recorded every system call it made: those are counted as they
//! are. Any other process is folded: each
//! recorded libc call becomes the system calls glibc (2.33 and later, x86_64) makes for it —
//! `open64`/`fopen` → `openat`, `stat` → `newfstatat`, `__xstat` → `stat`, `opendir` → `openat`
//! and `newfstatat`, `readdir` → `getdents64` when it refilled its buffer, `isatty` → `ioctl`,
//! clock reads → nothing (the vDSO) except for the CPU-time clocks. The first system call of a
//! fold carries the call's error and time; the others count once each when it succeeded. What
//! has no fixed system call is listed apart, not folded: stdio's buffered `fread`/`fwrite`
//! (zero or more `read`s and `write`s, and an `fstat` on first use), and `dlopen`/`dlclose`
//! (the loader's own opens, reads and maps, which no symbol hook sees).

use std::collections::BTreeMap;

use mlprof_format::func::{Api, Func};
use mlprof_format::record::{Event, FLAG_ERROR};
use serde::Serialize;

use crate::run::syscall_name;

/// Calls of one system call.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct SyscallStats {
    pub(crate) count: u64,
    pub(crate) errors: u64,
    pub(crate) total_ns: u64,
}

impl SyscallStats {
    fn add(&mut self, other: &SyscallStats) {
        self.count += other.count;
        self.errors += other.errors;
        self.total_ns += other.total_ns;
    }
}

/// Linux's EINVAL (the report does not depend on libc).
const EINVAL: i32 = 22;

/// The view: per system call name, and how each process was counted.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct SyscallView {
    pub(crate) syscalls: BTreeMap<String, SyscallStats>,
    /// Recorded calls with no fixed system call, by function (folded processes only).
    pub(crate) not_folded: BTreeMap<&'static str, u64>,
    /// Processes counted from trapped system calls (complete mode).
    pub(crate) trapped_pids: Vec<u32>,
    /// Processes counted by folding their libc calls.
    pub(crate) folded_pids: Vec<u32>,
    /// The same table per process (pid), so that one process, or a window a program marks by
    /// running it in a child, can be held against strace.
    pub(crate) per_pid: BTreeMap<u32, BTreeMap<String, SyscallStats>>,
}

impl SyscallView {
    /// Counts `stats` of system call `name` made by `pid`, in the total and per process.
    fn add(&mut self, pid: u32, name: &str, stats: &SyscallStats) {
        self.syscalls.entry(name.to_string()).or_default().add(stats);
        self.per_pid.entry(pid).or_default().entry(name.to_string()).or_default().add(stats);
    }
}

/// The system calls glibc makes for `func` as recorded in `event`: `Some(&[])` for none,
/// `None` for a call with no fixed system call (not folded). GPU and ITT records are not system
/// calls (`Some(&[])`).
pub(crate) fn folded(func: Func, event: &Event) -> Option<&'static [&'static str]> {
    if func.api() != Api::Libc {
        return Some(&[]);
    }
    let ok = !event.is_error();
    Some(match func {
        Func::Open | Func::Open64 | Func::Openat | Func::Openat64 | Func::Creat => &["openat"],
        // A mode fopen does not know fails before any system call.
        Func::Fopen | Func::Fopen64 if !ok && event.errno == EINVAL => &[],
        Func::Fopen | Func::Fopen64 => &["openat"],
        Func::Read => &["read"],
        Func::Pread | Func::Pread64 => &["pread64"],
        Func::Readv => &["readv"],
        Func::Preadv => &["preadv"],
        Func::Write => &["write"],
        Func::Pwrite | Func::Pwrite64 => &["pwrite64"],
        Func::Writev => &["writev"],
        Func::Pwritev => &["pwritev"],
        Func::Close | Func::Fclose | Func::Closedir => &["close"],
        Func::Lseek | Func::Lseek64 => &["lseek"],
        Func::Fsync => &["fsync"],
        Func::Fdatasync => &["fdatasync"],
        Func::SyncFileRange => &["sync_file_range"],
        Func::Mmap | Func::Mmap64 => &["mmap"],
        Func::Munmap => &["munmap"],
        // Events mode records each read; the vDSO serves these clocks without a system call.
        Func::ClockGettime if clock_needs_syscall(event.extra as i32) => &["clock_gettime"],
        Func::ClockGettime | Func::Gettimeofday => &[],
        Func::Ioctl | Func::Isatty | Func::Tcgetattr => &["ioctl"],
        Func::Stat | Func::Stat64 | Func::Lstat | Func::Lstat64 => &["newfstatat"],
        Func::Fstatat | Func::Fstatat64 | Func::Fxstatat | Func::Fxstatat64 => &["newfstatat"],
        // glibc refuses a negative fd itself.
        Func::Fstat | Func::Fstat64 if event.fd < 0 => &[],
        Func::Fstat | Func::Fstat64 => &["newfstatat"],
        Func::Statx => &["statx"],
        Func::Xstat | Func::Xstat64 => &["stat"],
        Func::Lxstat | Func::Lxstat64 => &["lstat"],
        Func::Fxstat | Func::Fxstat64 => &["fstat"],
        Func::Access => &["access"],
        Func::Faccessat => &["faccessat2"],
        Func::Opendir if ok => &["openat", "newfstatat"],
        Func::Opendir => &["openat"],
        Func::Fdopendir if ok => &["newfstatat", "fcntl", "fcntl"],
        Func::Fdopendir => &["newfstatat"],
        Func::Readdir | Func::Readdir64 if event.extra == 1 => &["getdents64"],
        Func::Readdir | Func::Readdir64 => &[],
        Func::Getdents64 => &["getdents64"],
        Func::Mkdir => &["mkdir"],
        Func::Mkdirat => &["mkdirat"],
        Func::Rmdir => &["rmdir"],
        Func::Unlink => &["unlink"],
        Func::Unlinkat => &["unlinkat"],
        Func::Rename => &["rename"],
        Func::Renameat => &["renameat"],
        Func::Dup => &["dup"],
        Func::Dup2 => &["dup2"],
        Func::Dup3 => &["dup3"],
        Func::Fcntl | Func::Fcntl64 => &["fcntl"],
        Func::Ftruncate | Func::Ftruncate64 => &["ftruncate"],
        Func::Fallocate | Func::Fallocate64 | Func::PosixFallocate | Func::PosixFallocate64 => &["fallocate"],
        Func::PosixFadvise | Func::PosixFadvise64 => &["fadvise64"],
        Func::Sendfile | Func::Sendfile64 => &["sendfile"],
        Func::CopyFileRange => &["copy_file_range"],
        Func::Fread | Func::Fwrite | Func::Dlopen | Func::Dlclose => return None,
        Func::TrappedSyscall => return None,
        // Every libc function is listed above; a new one is shown apart until it is.
        _ => return None,
    })
}

/// Whether `clock_gettime` of `clock` enters the kernel: the vDSO serves the realtime,
/// monotonic, raw, coarse, boottime and TAI clocks, not the CPU-time clocks (2, 3, and the
/// negative per-process and per-thread ids) or the alarm clocks.
pub(crate) fn clock_needs_syscall(clock: i32) -> bool {
    !matches!(clock, 0 | 1 | 4 | 5 | 6 | 7 | 11)
}

/// The counts while the events stream by: per (process, function, what folding looks at),
/// one hash lookup per event; folded at the end, chosen per process.
#[derive(Default)]
pub(super) struct SyscallTally {
    calls: rustc_hash::FxHashMap<(u32, u16, u32, bool), (u64, u64)>,
    /// Aggregated clock reads that enter the kernel, per process.
    clocks: rustc_hash::FxHashMap<u32, SyscallStats>,
}

/// What of a record its fold depends on besides the function and the error flag (see
/// [`folded`]), as one word.
fn fold_key(func: Func, event: &Event) -> u32 {
    match func {
        Func::Fopen | Func::Fopen64 => (event.errno == EINVAL) as u32,
        Func::Fstat | Func::Fstat64 => (event.fd < 0) as u32,
        Func::Readdir | Func::Readdir64 | Func::ClockGettime | Func::TrappedSyscall => event.extra,
        _ => 0,
    }
}

/// A record with the fields `fold_key` kept.
fn from_key(func: Func, key: u32, error: bool) -> Event {
    let mut event =
        Event { flags: if error { FLAG_ERROR } else { 0 }, extra: key, fd: 0, ..Event::default() };
    match func {
        Func::Fopen | Func::Fopen64 if key == 1 => event.errno = EINVAL,
        Func::Fstat | Func::Fstat64 if key == 1 => event.fd = -1,
        _ => {}
    }
    event
}

impl SyscallTally {
    #[inline]
    pub(super) fn add(&mut self, func: Func, event: &Event) {
        if func.api() != Api::Libc {
            return;
        }
        let key = (event.pid, event.kind, fold_key(func, event), event.is_error());
        let entry = self.calls.entry(key).or_default();
        entry.0 += 1;
        entry.1 += event.dur;
    }

    /// Adds `count` aggregated clock reads of `clock` (`None`: an id outside 0..=11) by `pid`.
    pub(super) fn add_clock_reads(&mut self, pid: u32, clock: Option<i32>, count: u64, total_ns: u64) {
        if clock.is_some_and(|c| !clock_needs_syscall(c)) || count == 0 {
            return;
        }
        self.clocks.entry(pid).or_default().add(&SyscallStats { count, errors: 0, total_ns });
    }

    pub(super) fn finish(self) -> SyscallView {
        let trapped: rustc_hash::FxHashSet<u32> = self
            .calls
            .keys()
            .filter(|(_, kind, _, _)| *kind == Func::TrappedSyscall as u16)
            .map(|(pid, _, _, _)| *pid)
            .collect();
        let mut view = SyscallView::default();
        let mut folded_pids = rustc_hash::FxHashSet::default();
        for (&(pid, kind, key, error), &(count, total_ns)) in &self.calls {
            let Some(func) = Func::from_id(kind) else { continue };
            let is_trapped = trapped.contains(&pid);
            if func == Func::TrappedSyscall {
                let stats = SyscallStats { count, errors: if error { count } else { 0 }, total_ns };
                view.add(pid, &syscall_name(key), &stats);
                continue;
            }
            if is_trapped {
                continue;
            }
            folded_pids.insert(pid);
            match folded(func, &from_key(func, key, error)) {
                None => *view.not_folded.entry(func.name()).or_default() += count,
                Some(names) => {
                    for (i, name) in names.iter().enumerate() {
                        let stats = match i {
                            0 => SyscallStats { count, errors: if error { count } else { 0 }, total_ns },
                            // The rest of a fold happen only when the call succeeded.
                            _ if error => continue,
                            _ => SyscallStats { count, errors: 0, total_ns: 0 },
                        };
                        view.add(pid, name, &stats);
                    }
                }
            }
        }
        for (pid, stats) in &self.clocks {
            if !trapped.contains(pid) {
                folded_pids.insert(*pid);
                view.add(*pid, "clock_gettime", stats);
            }
        }
        view.trapped_pids = trapped.into_iter().collect();
        view.trapped_pids.sort_unstable();
        view.folded_pids = folded_pids.into_iter().collect();
        view.folded_pids.sort_unstable();
        view
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(fd: i32, extra: u32, error: bool) -> Event {
        Event { fd, extra, flags: if error { FLAG_ERROR } else { 0 }, ..Event::default() }
    }

    #[test]
    fn libc_calls_fold_into_the_system_calls_glibc_makes() {
        let ok = event(3, 0, false);
        assert_eq!(folded(Func::Open64, &ok), Some(&["openat"][..]));
        assert_eq!(folded(Func::Stat, &ok), Some(&["newfstatat"][..]));
        assert_eq!(folded(Func::Xstat64, &ok), Some(&["stat"][..]));
        assert_eq!(folded(Func::Isatty, &event(3, 0, true)), Some(&["ioctl"][..]));
        assert_eq!(folded(Func::Opendir, &ok), Some(&["openat", "newfstatat"][..]));
        assert_eq!(folded(Func::Opendir, &event(-1, 0, true)), Some(&["openat"][..]));
        assert_eq!(folded(Func::Readdir64, &event(3, 1, false)), Some(&["getdents64"][..]));
        assert_eq!(folded(Func::Readdir64, &event(3, 0, false)), Some(&[][..]));
        assert_eq!(folded(Func::Fstat, &event(-1, 0, true)), Some(&[][..]));
        assert_eq!(folded(Func::Fread, &ok), None);
        assert_eq!(folded(Func::Dlopen, &ok), None);
        assert_eq!(folded(Func::CudaMalloc, &ok), Some(&[][..]));
    }

    #[test]
    fn every_libc_function_is_folded_or_listed_apart_on_purpose() {
        let apart = [Func::Fread, Func::Fwrite, Func::Dlopen, Func::Dlclose, Func::TrappedSyscall];
        for &f in Func::ALL {
            if f.api() == Api::Libc && !apart.contains(&f) {
                assert!(folded(f, &event(3, 0, false)).is_some(), "{} is not folded", f.name());
            }
        }
    }

    #[test]
    fn a_process_with_trapped_calls_is_counted_from_them_alone() {
        let mut tally = SyscallTally::default();
        let at = |func: Func, pid: u32, extra: u32, dur: u64| Event {
            kind: func as u16,
            pid,
            extra,
            dur,
            ..Event::default()
        };
        tally.add(Func::TrappedSyscall, &at(Func::TrappedSyscall, 1, 257, 10));
        tally.add(Func::Open64, &at(Func::Open64, 1, 0, 30));
        tally.add(Func::Open64, &at(Func::Open64, 2, 0, 20));
        tally.add(Func::Fread, &at(Func::Fread, 2, 0, 0));
        tally.add(Func::Opendir, &at(Func::Opendir, 2, 0, 5));
        let view = tally.finish();
        assert_eq!(view.syscalls["openat"], SyscallStats { count: 3, errors: 0, total_ns: 35 });
        assert_eq!(view.syscalls["newfstatat"], SyscallStats { count: 1, errors: 0, total_ns: 0 });
        assert_eq!(view.trapped_pids, [1]);
        assert_eq!(view.folded_pids, [2]);
        assert_eq!(view.not_folded["fread"], 1);
        assert_eq!(view.per_pid[&1]["openat"], SyscallStats { count: 1, errors: 0, total_ns: 10 });
        assert_eq!(view.per_pid[&2]["openat"], SyscallStats { count: 2, errors: 0, total_ns: 25 });
        assert!(!view.per_pid[&2].contains_key("fread"));
    }
}

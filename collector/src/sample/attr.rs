//! The perf event the sampler opens: its `perf_event_attr`, the system call, and the CPUs it
//! is opened on. Nothing here reads a ring or knows what a record means.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// `struct perf_event_attr` as of `PERF_ATTR_SIZE_VER8` (Linux 6.3, 136 bytes). A kernel older
/// than the size we pass accepts it as long as the fields it does not know are zero (it checks
/// that), so one layout serves every kernel since 4.1 (`use_clockid`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct PerfEventAttr {
    pub(crate) kind: u32,
    pub(crate) size: u32,
    pub(crate) config: u64,
    /// `sample_period`, or `sample_freq` when the `freq` flag is set.
    pub(crate) sample_period_or_freq: u64,
    pub(crate) sample_type: u64,
    pub(crate) read_format: u64,
    /// The C bitfield (`disabled`, `inherit`, …): the `FLAG_*` bits.
    pub(crate) flags: u64,
    /// `wakeup_events`, or `wakeup_watermark` (bytes) when `FLAG_WATERMARK` is set.
    pub(crate) wakeup: u32,
    pub(crate) bp_type: u32,
    pub(crate) config1: u64,
    pub(crate) config2: u64,
    pub(crate) branch_sample_type: u64,
    pub(crate) sample_regs_user: u64,
    pub(crate) sample_stack_user: u32,
    pub(crate) clockid: i32,
    pub(crate) sample_regs_intr: u64,
    pub(crate) aux_watermark: u32,
    pub(crate) sample_max_stack: u16,
    pub(crate) reserved_2: u16,
    pub(crate) aux_sample_size: u32,
    pub(crate) aux_action: u32,
    pub(crate) sig_data: u64,
    pub(crate) config3: u64,
}

const _: () = assert!(size_of::<PerfEventAttr>() == 136);

pub(crate) const PERF_TYPE_SOFTWARE: u32 = 1;
/// The software `cpu-clock` event: an hrtimer on the task's CPU time; there are no hardware
/// counters in the VMs this runs on.
pub(crate) const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;

pub(crate) const SAMPLE_IP: u64 = 1 << 0;
pub(crate) const SAMPLE_TID: u64 = 1 << 1;
pub(crate) const SAMPLE_TIME: u64 = 1 << 2;
pub(crate) const SAMPLE_REGS_USER: u64 = 1 << 12;
pub(crate) const SAMPLE_STACK_USER: u64 = 1 << 13;

// The bitfield of `perf_event_attr`, bit by bit (include/uapi/linux/perf_event.h).
pub(crate) const FLAG_DISABLED: u64 = 1 << 0;
pub(crate) const FLAG_INHERIT: u64 = 1 << 1;
pub(crate) const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
pub(crate) const FLAG_EXCLUDE_HV: u64 = 1 << 6;
pub(crate) const FLAG_MMAP: u64 = 1 << 8;
pub(crate) const FLAG_COMM: u64 = 1 << 9;
pub(crate) const FLAG_FREQ: u64 = 1 << 10;
pub(crate) const FLAG_ENABLE_ON_EXEC: u64 = 1 << 12;
pub(crate) const FLAG_TASK: u64 = 1 << 13;
pub(crate) const FLAG_WATERMARK: u64 = 1 << 14;
pub(crate) const FLAG_SAMPLE_ID_ALL: u64 = 1 << 18;
pub(crate) const FLAG_MMAP2: u64 = 1 << 23;
pub(crate) const FLAG_COMM_EXEC: u64 = 1 << 24;
pub(crate) const FLAG_USE_CLOCKID: u64 = 1 << 25;

const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// What every record of the sampler carries: a sample's `ip, pid/tid, time, regs, stack`, and
/// (`sample_id_all`) a trailing `pid/tid, time` on the other records. The parser
/// (`parse.rs`) reads exactly these fields in this order.
pub(crate) const SAMPLE_TYPE: u64 =
    SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_REGS_USER | SAMPLE_STACK_USER;

/// When the events start counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// At the target's next `execve` (`enable_on_exec`): a child held before its exec
    /// (`gate::spawn_attached`) is sampled from the first instruction of the program, and the
    /// kernel reports the new image's mappings itself.
    OnExec,
    /// At once: a process already running.
    Now,
}

/// The attribute of the per-CPU sampling events.
pub(crate) fn sampling_attr(
    hz: u32,
    stack_bytes: u32,
    regs_mask: u64,
    wakeup_bytes: u32,
    start: Start,
) -> PerfEventAttr {
    let mut flags = FLAG_INHERIT
        | FLAG_EXCLUDE_KERNEL
        | FLAG_EXCLUDE_HV
        | FLAG_MMAP
        | FLAG_MMAP2
        | FLAG_COMM
        | FLAG_COMM_EXEC
        | FLAG_TASK
        | FLAG_FREQ
        | FLAG_SAMPLE_ID_ALL
        | FLAG_USE_CLOCKID
        | FLAG_WATERMARK;
    if start == Start::OnExec {
        flags |= FLAG_DISABLED | FLAG_ENABLE_ON_EXEC;
    }
    PerfEventAttr {
        kind: PERF_TYPE_SOFTWARE,
        size: size_of::<PerfEventAttr>() as u32,
        config: PERF_COUNT_SW_CPU_CLOCK,
        sample_period_or_freq: u64::from(hz),
        sample_type: SAMPLE_TYPE,
        flags,
        wakeup: wakeup_bytes,
        sample_regs_user: regs_mask,
        sample_stack_user: stack_bytes,
        clockid: libc::CLOCK_MONOTONIC,
        ..PerfEventAttr::default()
    }
}

/// `perf_event_open(attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC)`.
pub(crate) fn perf_event_open(attr: &PerfEventAttr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    // Safety: `attr` is a live, fully initialized perf_event_attr whose `size` is its own size;
    // the kernel only reads it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const PerfEventAttr,
            pid,
            cpu,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // Safety: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Turns an event off (`PERF_EVENT_IOC_DISABLE`), its inherited copies included: after it, the
/// ring receives nothing new and a last drain empties it.
pub(crate) fn disable(fd: &OwnedFd) {
    use std::os::fd::AsRawFd;
    const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
    // Safety: an ioctl without argument on a perf event descriptor we own.
    unsafe { libc::ioctl(fd.as_raw_fd(), PERF_EVENT_IOC_DISABLE, 0) };
}

/// Sends `fd`'s records into the ring mapped from `into` (`PERF_EVENT_IOC_SET_OUTPUT`): both
/// count on the same CPU with the same clock, so one ring per CPU serves every process
/// followed.
pub(crate) fn set_output(fd: &OwnedFd, into: &OwnedFd) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    const PERF_EVENT_IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
    // Safety: an ioctl on a perf event descriptor we own, whose argument is another one.
    let done = unsafe { libc::ioctl(fd.as_raw_fd(), PERF_EVENT_IOC_SET_OUTPUT, into.as_raw_fd()) };
    if done < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// The online CPUs, from `/sys/devices/system/cpu/online` (`0-3,8,10-11`); every CPU up to the
/// configured count when the file cannot be read.
pub(crate) fn online_cpus() -> Vec<u32> {
    match std::fs::read_to_string("/sys/devices/system/cpu/online") {
        Ok(list) => parse_cpu_list(&list),
        Err(_) => {
            // Safety: sysconf has no preconditions.
            let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
            (0..n.max(1) as u32).collect()
        }
    }
}

/// A kernel CPU list (`0-3,8`); malformed parts are skipped.
pub(crate) fn parse_cpu_list(list: &str) -> Vec<u32> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(first), Ok(last)) = (first.parse::<u32>(), last.parse::<u32>()) {
            cpus.extend(first..=last);
        }
    }
    cpus
}

/// `kernel.perf_event_paranoid`; `None` where the file is missing (a kernel without perf events).
pub(crate) fn paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_as_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("0-3,8,10-11\n"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list("0\n"), vec![0]);
        assert_eq!(parse_cpu_list(""), Vec::<u32>::new());
    }

    #[test]
    fn the_attr_asks_for_what_the_parser_reads() {
        let attr = sampling_attr(499, 16384, 0b111 << 6, 4096, Start::OnExec);
        assert_eq!(attr.size, 136);
        assert_eq!(attr.sample_type, 0b11_0000_0000_0111);
        assert_eq!(attr.sample_period_or_freq, 499);
        assert_eq!(attr.clockid, libc::CLOCK_MONOTONIC);
        for flag in
            [FLAG_DISABLED, FLAG_ENABLE_ON_EXEC, FLAG_INHERIT, FLAG_EXCLUDE_KERNEL, FLAG_SAMPLE_ID_ALL]
        {
            assert_ne!(attr.flags & flag, 0, "{flag:#x}");
        }
        let now = sampling_attr(499, 16384, 0, 4096, Start::Now);
        assert_eq!(now.flags & (FLAG_DISABLED | FLAG_ENABLE_ON_EXEC), 0);
    }
}

//! What of complete mode can be checked without trapping the test process itself (the
//! integration tests in tests/tests/all_syscalls.rs run real programs trapped).

use super::raw::{self, KernelSigaction, signal_bit};
use super::*;

#[test]
fn the_handlers_return_has_the_bytes_unwinders_recognise() {
    // glibc's __restore_rt: `mov $15, %rax; syscall`, which libgcc's unwinder matches to step
    // through a signal frame (a thread cancelled in a trapped call unwinds through ours).
    let code = &raw const mlprof_trap_sigreturn;
    // Safety: nine bytes of our own code.
    let bytes = unsafe { core::slice::from_raw_parts(code, 9) };
    assert_eq!(bytes, [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05]);
    let (start, len) = region();
    assert!((start..start + len).contains(&(code as u64 + 9)), "the return's syscall is in the range");
}

#[test]
fn each_clone_site_gets_one_stub_until_they_run_out() {
    let stubs = &raw const mlprof_trap_clone_stubs as usize;
    let first = clone_stub(0x1000).expect("a stub");
    assert_eq!(clone_stub(0x1000), Some(first), "the same site, the same stub");
    let second = clone_stub(0x2000).expect("another stub");
    assert_ne!(first, second);
    assert_eq!((second - stubs) % CLONE_STUB_BYTES, 0);
    let (start, len) = region();
    let mut last = second;
    for site in 3..=CLONE_SLOTS {
        last = clone_stub(site * 0x1000).expect("a free stub");
    }
    assert!((last as u64 + 2) <= start + len, "every stub's syscall lies in the untrapped range");
    assert_eq!(clone_stub(0xdead_0000), None, "all taken");
    assert_eq!(clone_stub(0x1000), Some(first), "known sites still find theirs");
}

#[test]
fn vfork_children_are_told_from_threads_and_forks() {
    let vfork = (libc::CLONE_VM | libc::CLONE_VFORK) as u64;
    assert!(makes_a_vfork_child(libc::SYS_vfork, 0));
    assert!(makes_a_vfork_child(libc::SYS_clone, vfork | libc::SIGCHLD as u64));
    assert!(!makes_a_vfork_child(libc::SYS_clone, libc::CLONE_VM as u64 | libc::CLONE_THREAD as u64));
    assert!(!makes_a_vfork_child(libc::SYS_fork, 0));
    let args: [u64; 11] = [vfork, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    assert!(makes_a_vfork_child(libc::SYS_clone3, args.as_ptr() as u64));
    let thread: [u64; 11] = [libc::CLONE_VM as u64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    assert!(!makes_a_vfork_child(libc::SYS_clone3, thread.as_ptr() as u64));
    assert!(!makes_a_vfork_child(libc::SYS_clone3, 8), "an unreadable clone_args is no vfork");
}

extern "C" fn ignore(_: libc::c_int) {}

#[test]
fn an_installed_mask_never_holds_sigsys_and_reads_back_as_asked() {
    let sigsys = signal_bit(libc::SIGSYS);
    let mut saved = KernelSigaction::default();
    assert_eq!(raw::sigaction(libc::SIGURG, None, Some(&mut saved)), 0);
    let asked = KernelSigaction {
        handler: ignore as *const () as usize,
        flags: SA_RESTORER,
        restorer: saved.restorer,
        mask: sigsys | signal_bit(libc::SIGUSR2),
    };
    let args = |act: &KernelSigaction, old: &mut KernelSigaction| {
        [libc::SIGURG as u64, act as *const _ as u64, old as *mut _ as u64, raw::SIGSET_BYTES, 0, 0]
    };
    let mut old = KernelSigaction::default();
    assert_eq!(signals::sigaction(args(&asked, &mut old)), 0);
    let mut installed = KernelSigaction::default();
    raw::sigaction(libc::SIGURG, None, Some(&mut installed));
    assert_eq!(installed.mask, signal_bit(libc::SIGUSR2), "the kernel holds the mask less SIGSYS");
    let mut back = KernelSigaction::default();
    let query = [libc::SIGURG as u64, 0, &mut back as *mut _ as u64, raw::SIGSET_BYTES, 0, 0];
    assert_eq!(signals::sigaction(query), 0);
    assert_eq!(back.mask, asked.mask, "the program reads back what it asked for");
    // A bad pointer is EFAULT, not a fault.
    let bad = [libc::SIGURG as u64, 8, 0, raw::SIGSET_BYTES, 0, 0];
    assert_eq!(signals::sigaction(bad), -(libc::EFAULT as i64));
    assert_eq!(signals::sigaction(args(&saved, &mut old)), 0);
}

#[test]
fn the_programs_sigsys_action_is_kept_aside() {
    let mut kernel_before = KernelSigaction::default();
    raw::sigaction(libc::SIGSYS, None, Some(&mut kernel_before));
    let before = signals::app_sigsys();
    let mine = KernelSigaction { handler: ignore as *const () as usize, ..KernelSigaction::default() };
    let mut old = KernelSigaction::default();
    let set =
        [libc::SIGSYS as u64, &mine as *const _ as u64, &mut old as *mut _ as u64, raw::SIGSET_BYTES, 0, 0];
    assert_eq!(signals::sigaction(set), 0);
    assert_eq!(old, before);
    assert_eq!(signals::app_sigsys(), mine);
    let mut kernel_after = KernelSigaction::default();
    raw::sigaction(libc::SIGSYS, None, Some(&mut kernel_after));
    assert_eq!(kernel_after, kernel_before, "the kernel's SIGSYS action is untouched");
    signals::set_app_sigsys(&before);
}

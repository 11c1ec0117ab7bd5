//! Complete mode (`mlprof-collect --all-syscalls`, `MLPROF_ALL_SYSCALLS=1`): every system call
//! a thread makes, whoever makes it (glibc inside other functions, raw `syscall()`, inline
//! `syscall` instructions, the loader inside `dlopen`), is recorded as a
//! [`Func::TrappedSyscall`](mlprof_format::func::Func) with its number.
//!
//! How: Linux's syscall user dispatch (`PR_SET_SYSCALL_USER_DISPATCH`, 5.11+; not ptrace, not
//! seccomp, nothing inherited by programs we do not load into). Each thread names a selector
//! byte (thread-local); while it says "block", every system call made outside one small code
//! range raises SIGSYS instead of entering the kernel. Our SIGSYS handler makes the call itself
//! with the application's registers, records it, and returns its value as the kernel would
//! have. The range ([`stubs.S`](stubs.S)) holds the only system calls that pass: the handler's
//! return (`rt_sigreturn`) and the stubs that make clone-like calls.
//!
//! The kernel turns trapping off in every new thread and process and at exec: a child made by
//! a trapped clone/fork turns it on itself in its stub (a vfork child does not: it runs on its
//! parent's memory until it execs), and a new program turns it on in our constructor, which
//! also records the `execve` that started it (a successful `execve` never returns to be
//! recorded; a failed one is recorded where it failed).
//!
//! Special calls: `rt_sigreturn` (an application handler's return) is redone from the range;
//! clone, clone3, fork and vfork are made by their call site's stub, so that a new thread
//! starts on its own stack outside our handler; `exit`/`exit_group` are recorded before they
//! are made; the signal calls are answered by [`signals`].
//!
//! Cost: a signal delivery and return per system call, plus the call (BENCHMARKS.md).
//!
//! Not seen: what runs before our constructor (the loader mapping the program's libraries),
//! a vfork child until it execs, and the calls of an application signal handler that
//! interrupts our own recording code (a few instructions around each record).

mod raw;
mod signals;

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::guard;
use crate::recorder::Span;
use raw::KernelSigaction;

/// `prctl` option and modes (linux/prctl.h), and the selector's values.
const PR_SET_SYSCALL_USER_DISPATCH: u64 = 59;
const PR_SYS_DISPATCH_ON: u64 = 1;
const SELECTOR_ALLOW: u8 = 0;
const SELECTOR_BLOCK: u8 = 1;
/// `si_code` of a SIGSYS raised by syscall user dispatch.
const SYS_USER_DISPATCH: c_int = 2;
/// `mlprof_trap_state[1]` before a trapped clone: the child is a vfork child.
const KIND_VFORK: u8 = 1;
/// Stubs for clone-like call sites (stubs.S `SLOTS`, each 32 bytes).
const CLONE_SLOTS: usize = 64;
const CLONE_STUB_BYTES: usize = 32;
const SA_RESTORER: u64 = 0x0400_0000;

unsafe extern "C" {
    static mlprof_trap_region_start: u8;
    static mlprof_trap_region_end: u8;
    static mlprof_trap_sigreturn: u8;
    static mlprof_trap_clone_stubs: u8;
    /// Where each clone stub's call returns to (0: slot free).
    static mlprof_trap_resume: [AtomicUsize; CLONE_SLOTS];
    /// The calling thread's trap state: [0] selector, [1] kind of child being made.
    fn mlprof_trap_state_of_thread() -> *mut u8;
}

/// Set once this process image traps.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether this process image traps its system calls.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Whether the options ask for complete mode (`MLPROF_ALL_SYSCALLS=1`).
pub fn requested() -> bool {
    crate::config::flag(c"MLPROF_ALL_SYSCALLS")
}

fn region() -> (u64, u64) {
    let (start, end) = (&raw const mlprof_trap_region_start as u64, &raw const mlprof_trap_region_end as u64);
    (start, end - start)
}

/// The calling thread's trap state (see `mlprof_trap_state_of_thread`).
fn thread_trap_state() -> *mut u8 {
    // Safety: returns this thread's static TLS bytes (thread_state.c).
    unsafe { mlprof_trap_state_of_thread() }
}

fn set_selector(state: *mut u8, value: u8) {
    // Safety: this thread's selector byte; volatile so that it is stored before the system
    // calls that follow and not merged with the next store.
    unsafe { state.write_volatile(value) };
}

/// Turns complete mode on for this process image, from the library's constructor (once the
/// process records): installs the SIGSYS handler, takes SIGSYS out of every mask, starts
/// trapping this thread and records the `execve` that started the program. Returns whether
/// trapping is on (false on kernels before 5.11 or where a seccomp policy forbids it: the
/// process then records in the default mode).
pub fn enable_for_process() -> bool {
    if ENABLED.load(Ordering::Relaxed) {
        return true;
    }
    // Looked up now, outside any handler (see `library::contains_known`).
    if crate::library::text_range().is_none() {
        return false;
    }
    let mut old = KernelSigaction::default();
    if raw::sigaction(libc::SIGSYS, None, Some(&mut old)) != 0 {
        return false;
    }
    let ours = KernelSigaction {
        handler: on_sigsys as *const () as usize,
        flags: (libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_RESTART) as u64 | SA_RESTORER,
        restorer: &raw const mlprof_trap_sigreturn as usize,
        mask: 0,
    };
    signals::set_app_sigsys(&old);
    if raw::sigaction(libc::SIGSYS, Some(&ours), None) != 0 {
        return false;
    }
    if !enable_for_thread() {
        raw::sigaction(libc::SIGSYS, Some(&old), None);
        return false;
    }
    // Only once trapping is on (refused, the program is left exactly as it was); these calls
    // go through the untrapped range.
    signals::unmask_sigsys_everywhere();
    ENABLED.store(true, Ordering::Relaxed);
    // The execve that started this program: made before we were loaded.
    if let Some(span) = Span::begin_trapped() {
        span.finish_trapped(libc::SYS_execve as u32, [0, 0], 0, true);
    }
    true
}

/// Starts trapping the calling thread's system calls.
fn enable_for_thread() -> bool {
    let state = thread_trap_state();
    let (start, len) = region();
    set_selector(state, SELECTOR_ALLOW);
    let args = [PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, start, len, state as u64, 0];
    // Safety: prctl with integer arguments and our own selector's address, which lives as long
    // as the thread.
    let on = unsafe { raw::syscall6(libc::SYS_prctl, args) } == 0;
    if on {
        set_selector(state, SELECTOR_BLOCK);
    }
    on
}

/// The SIGSYS handler. Runs on the application's stack, with SIGSYS not blocked. The thread
/// keeps trapping while it runs: the calls it makes go through the untrapped range
/// ([`raw::syscall6`]), so that an application signal handler that a call lets in (a
/// `raise`, a signal ending a blocking `read`) has its own calls trapped and recorded, in a
/// handler of its own. Only our recording code runs with trapping off (its system calls are
/// ours). errno is kept.
extern "C" fn on_sigsys(signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    guard::keeping_errno(|| {
        // Safety: the kernel passes a valid siginfo.
        let code = unsafe { info.as_ref() }.map_or(0, |info| info.si_code);
        // Safety: and, for a SA_SIGINFO handler, the interrupted context.
        match unsafe { context.cast::<libc::ucontext_t>().as_mut() } {
            Some(context) if code == SYS_USER_DISPATCH => dispatch(context),
            _ => {
                if signals::forward(signal, info, context) {
                    // The application's handler ran and returned, as after a delivery of its
                    // own, which the kernel ends with an rt_sigreturn (made from our frame).
                    if let Some(span) = untrapped(Span::begin_trapped) {
                        untrapped(|| span.finish_trapped(libc::SYS_rt_sigreturn as u32, [0, 0], 0, true));
                    }
                }
            }
        }
    });
}

/// Runs our recording code `f` with the calling thread's trapping off.
fn untrapped<R>(f: impl FnOnce() -> R) -> R {
    let state = thread_trap_state();
    set_selector(state, SELECTOR_ALLOW);
    let result = f();
    set_selector(state, SELECTOR_BLOCK);
    result
}

/// Makes (or has made) the trapped system call whose registers are in `context`, and records it.
fn dispatch(context: &mut libc::ucontext_t) {
    let regs = &mut context.uc_mcontext.gregs;
    let reg = |r: c_int| regs.get(r as usize).copied().unwrap_or(0);
    // After the trap the kernel left the system call's number in rax and the address after the
    // `syscall` instruction in rip.
    let number = reg(libc::REG_RAX);
    let rip = reg(libc::REG_RIP) as usize;
    let args = [libc::REG_RDI, libc::REG_RSI, libc::REG_RDX, libc::REG_R10, libc::REG_R8, libc::REG_R9]
        .map(|r| reg(r) as u64);
    // A call from our own code (the recorder's raw system calls) is made, not recorded.
    let ours = crate::library::contains_known(rip);
    let span = if ours { None } else { untrapped(Span::begin_trapped) };
    let record = |span: Option<Span>, ret: i64, at_once: bool| {
        if let Some(span) = span {
            untrapped(|| span.finish_trapped(number as u32, [args[0], args[1]], ret, at_once));
        }
    };
    let set = |regs: &mut [i64; 23], r: c_int, value: i64| {
        if let Some(slot) = regs.get_mut(r as usize) {
            *slot = value;
        }
    };
    match number {
        libc::SYS_rt_sigreturn => {
            // An application handler returning through glibc's restorer: redone from the range,
            // on the same stack.
            record(span, 0, true);
            set(regs, libc::REG_RIP, &raw const mlprof_trap_sigreturn as i64);
            return;
        }
        libc::SYS_clone | libc::SYS_clone3 | libc::SYS_fork | libc::SYS_vfork => {
            let vfork = makes_a_vfork_child(number, args[0]);
            // Safety: this thread's state bytes; [1] is read by the child in its stub.
            unsafe { thread_trap_state().add(1).write_volatile(if vfork { KIND_VFORK } else { 0 }) };
            match clone_stub(rip) {
                Some(stub) => {
                    record(span, 0, true);
                    set(regs, libc::REG_RIP, stub as i64);
                }
                None => {
                    // Every stub taken by other call sites (never seen): refused as the kernel
                    // refuses a clone it cannot make now.
                    let ret = -(libc::EAGAIN as i64);
                    record(span, ret, true);
                    set(regs, libc::REG_RAX, ret);
                }
            }
            return;
        }
        libc::SYS_exit | libc::SYS_exit_group => {
            // Never returns: recorded first.
            record(span, 0, true);
            // Safety: the application's own exit call.
            unsafe { raw::syscall6(number, args) };
            return;
        }
        _ => {}
    }
    let ret = match number {
        libc::SYS_rt_sigprocmask => signals::sigprocmask(context, args),
        libc::SYS_rt_sigaction => signals::sigaction(args),
        // Safety: the application's call with its own arguments, made on its behalf; the kernel
        // checks them as it would have.
        _ => unsafe { raw::syscall6(number, args) },
    };
    set(&mut context.uc_mcontext.gregs, libc::REG_RAX, ret);
    record(span, ret, false);
}

/// Whether a clone-like call makes a child that runs on our memory until it execs (vfork,
/// `CLONE_VM | CLONE_VFORK` as posix_spawn makes).
fn makes_a_vfork_child(number: i64, first: u64) -> bool {
    let vfork = (libc::CLONE_VM | libc::CLONE_VFORK) as u64;
    match number {
        libc::SYS_vfork => true,
        libc::SYS_clone => first & vfork == vfork,
        // clone3's first argument points to `struct clone_args`, flags first.
        libc::SYS_clone3 => raw::read_user::<u64>(first).is_some_and(|flags| flags & vfork == vfork),
        _ => false,
    }
}

/// The stub that makes a clone-like call for the call site returning to `resume`, claiming a
/// free one on the site's first call.
fn clone_stub(resume: usize) -> Option<usize> {
    let stubs = &raw const mlprof_trap_clone_stubs as usize;
    // Safety: the slot table of stubs.S: zero-filled .bss, atomics, never moved or freed.
    let slots = unsafe { &mlprof_trap_resume };
    for (index, slot) in slots.iter().enumerate() {
        let found = match slot.load(Ordering::Acquire) {
            0 => match slot.compare_exchange(0, resume, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => true,
                Err(other) => other == resume,
            },
            site => site == resume,
        };
        if found {
            return Some(stubs + index * CLONE_STUB_BYTES);
        }
    }
    None
}

#[cfg(test)]
mod tests;

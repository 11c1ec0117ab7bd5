//! The signal calls complete mode must answer itself, because SIGSYS is how it works:
//!
//! * SIGSYS must never be blocked when a call traps: the kernel would then reset the handler
//!   and kill the process. So no mask the application sets, with `rt_sigprocmask` or in a
//!   handler's `sa_mask`, ever really holds SIGSYS; the application is told it does.
//! * `rt_sigprocmask` made inside our handler would be undone when the handler returns (the
//!   kernel restores the mask saved in the signal frame): its result goes into that frame.
//! * The application's own SIGSYS action is kept aside, ours stays installed; a SIGSYS that is
//!   not a trap (`kill`, a seccomp filter's) goes to the application's action.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicU64, Ordering};

use super::raw::{self, KernelSigaction, signal_bit};
use crate::guard;

const SIGSYS_BIT: u64 = signal_bit(libc::SIGSYS);

/// The application's SIGSYS action (handler, flags, restorer, mask).
static APP_SIGSYS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// The signals whose action the application gave SIGSYS in `sa_mask` (bit `signal - 1`).
static MASKS_SIGSYS: AtomicU64 = AtomicU64::new(0);

pub(super) fn app_sigsys() -> KernelSigaction {
    let word = |i: usize| APP_SIGSYS.get(i).map_or(0, |w| w.load(Ordering::Relaxed));
    KernelSigaction { handler: word(0) as usize, flags: word(1), restorer: word(2) as usize, mask: word(3) }
}

pub(super) fn set_app_sigsys(action: &KernelSigaction) {
    let words = [action.handler as u64, action.flags, action.restorer as u64, action.mask];
    for (slot, value) in APP_SIGSYS.iter().zip(words) {
        slot.store(value, Ordering::Relaxed);
    }
}

fn set_masks_sigsys(signal: i32, masks: bool) {
    let bit = signal_bit(signal);
    if masks {
        MASKS_SIGSYS.fetch_or(bit, Ordering::Relaxed);
    } else {
        MASKS_SIGSYS.fetch_and(!bit, Ordering::Relaxed);
    }
}

/// At start: takes SIGSYS out of every installed action's `sa_mask` (actions installed before
/// trapping began, by the program or inherited as ignored) and out of this thread's mask.
pub(super) fn unmask_sigsys_everywhere() {
    for signal in 1..=64 {
        if signal == libc::SIGSYS || signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        let mut action = KernelSigaction::default();
        if raw::sigaction(signal, None, Some(&mut action)) != 0 || action.mask & SIGSYS_BIT == 0 {
            continue;
        }
        set_masks_sigsys(signal, true);
        action.mask &= !SIGSYS_BIT;
        raw::sigaction(signal, Some(&action), None);
    }
    let mut old = 0u64;
    if raw::sigprocmask(libc::SIG_UNBLOCK, Some(&SIGSYS_BIT), Some(&mut old)) == 0
        && let Some(state) = guard::current()
    {
        state.trap_sigsys_blocked.set(old & SIGSYS_BIT != 0);
    }
}

/// The mask word the kernel restores when the handler returns.
fn frame_mask(context: &mut libc::ucontext_t) -> &mut u64 {
    // Safety: sigset_t is at least 8 bytes and 8-aligned; the kernel's mask is its first word.
    unsafe { &mut *(&mut context.uc_sigmask as *mut libc::sigset_t).cast::<u64>() }
}

/// A trapped `rt_sigprocmask(how, set, oldset, sigsetsize)`: made exactly as asked (same
/// checks, same errors, `oldset` filled by the kernel) on the mask the application had, and the
/// result put into the signal frame, less SIGSYS.
pub(super) fn sigprocmask(context: &mut libc::ucontext_t, args: [u64; 6]) -> i64 {
    let Some(state) = guard::current() else { return -(libc::ENOSYS as i64) };
    if args[3] != raw::SIGSET_BYTES {
        // Refused (EINVAL) before anything is read or changed.
        // Safety: the application's call as it made it.
        return unsafe { raw::syscall6(libc::SYS_rt_sigprocmask, args) };
    }
    let seen = *frame_mask(context) | if state.trap_sigsys_blocked.get() { SIGSYS_BIT } else { 0 };
    let mut ours = 0u64;
    raw::sigprocmask(libc::SIG_SETMASK, Some(&seen), Some(&mut ours));
    // Safety: the application's call as it made it; the kernel checks its pointers.
    let ret = unsafe { raw::syscall6(libc::SYS_rt_sigprocmask, args) };
    let mut now = 0u64;
    raw::sigprocmask(libc::SIG_BLOCK, None, Some(&mut now));
    raw::sigprocmask(libc::SIG_SETMASK, Some(&ours), None);
    state.trap_sigsys_blocked.set(now & SIGSYS_BIT != 0);
    *frame_mask(context) = now & !SIGSYS_BIT;
    ret
}

/// A trapped `rt_sigaction(signal, act, oldact, sigsetsize)`: SIGSYS's action is the
/// application's kept aside; any other is installed less SIGSYS in its mask, and reported back
/// with it.
pub(super) fn sigaction(args: [u64; 6]) -> i64 {
    let [signal, act, oldact, size, ..] = args;
    let signal = signal as i32;
    if size != raw::SIGSET_BYTES || !(1..=64).contains(&signal) {
        // Safety: the application's call as it made it (the kernel refuses it).
        return unsafe { raw::syscall6(libc::SYS_rt_sigaction, args) };
    }
    let efault = -(libc::EFAULT as i64);
    if signal == libc::SIGSYS {
        let new = if act != 0 {
            match raw::read_user::<KernelSigaction>(act) {
                Some(new) => Some(new),
                None => return efault,
            }
        } else {
            None
        };
        if oldact != 0 && !raw::write_user(oldact, &app_sigsys()) {
            return efault;
        }
        if let Some(new) = new {
            set_app_sigsys(&new);
        }
        return 0;
    }
    let masked_before = MASKS_SIGSYS.load(Ordering::Relaxed) & signal_bit(signal) != 0;
    let ret = match (act != 0).then(|| raw::read_user::<KernelSigaction>(act)) {
        Some(Some(mut new)) => {
            let masks = new.mask & SIGSYS_BIT != 0;
            new.mask &= !SIGSYS_BIT;
            // Safety: our copy of the new action; `oldact` is the application's, checked by
            // the kernel.
            let ret = unsafe {
                raw::syscall6(
                    libc::SYS_rt_sigaction,
                    [signal as u64, &new as *const _ as u64, oldact, size, 0, 0],
                )
            };
            if ret == 0 {
                set_masks_sigsys(signal, masks);
            }
            ret
        }
        // No new action, or an unreadable one (the kernel answers EFAULT itself).
        // Safety: the application's call as it made it.
        _ => unsafe { raw::syscall6(libc::SYS_rt_sigaction, args) },
    };
    if ret == 0 && oldact != 0 && masked_before {
        let mask_at = oldact + core::mem::offset_of!(KernelSigaction, mask) as u64;
        if let Some(mask) = raw::read_user::<u64>(mask_at) {
            raw::write_user(mask_at, &(mask | SIGSYS_BIT));
        }
    }
    ret
}

/// A SIGSYS that is not one of our traps: what the application's action says. Returns
/// whether the application's handler ran.
pub(super) fn forward(signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void) -> bool {
    let action = app_sigsys();
    match action.handler {
        h if h == libc::SIG_IGN => false,
        h if h == libc::SIG_DFL => {
            // The default action (the process dies, with a core): ours goes, and the signal
            // is sent again, to be taken as soon as this handler returns.
            raw::sigaction(libc::SIGSYS, Some(&KernelSigaction::default()), None);
            let (pid, tid) = (raw::getpid(), raw::gettid());
            // Safety: tgkill with integer arguments.
            unsafe { raw::syscall6(libc::SYS_tgkill, [pid, tid, libc::SIGSYS as u64, 0, 0, 0]) };
            false
        }
        handler if action.flags & libc::SA_SIGINFO as u64 != 0 => {
            type Handler = unsafe extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void);
            // Safety: the application installed this SA_SIGINFO handler for SIGSYS.
            let handler: Handler = unsafe { core::mem::transmute::<usize, Handler>(handler) };
            // Safety: calling it as the kernel would have.
            unsafe { handler(signal, info, context) };
            true
        }
        handler => {
            type Handler = unsafe extern "C" fn(c_int);
            // Safety: the application installed this handler for SIGSYS.
            let handler: Handler = unsafe { core::mem::transmute::<usize, Handler>(handler) };
            // Safety: calling it as the kernel would have.
            unsafe { handler(signal) };
            true
        }
    }
}

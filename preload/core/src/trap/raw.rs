//! The raw kernel interface complete mode needs: a system call that never goes through libc
//! (which is hooked, and which sets errno), the kernel's own `sigaction` layout, and copies
//! from and to the application's memory that report a bad address instead of faulting.

/// The kernel's `struct sigaction` on x86_64 (not libc's: the mask is the kernel's 64 bits,
/// and the restorer is explicit).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelSigaction {
    pub handler: usize,
    pub flags: u64,
    pub restorer: usize,
    pub mask: u64,
}

/// The size of the kernel's signal set, the only `sigsetsize` it accepts.
pub const SIGSET_BYTES: u64 = 8;

unsafe extern "C" {
    /// stubs.S: makes a system call from inside the untrapped range.
    fn mlprof_trap_syscall(number: i64, a1: u64, a2: u64, a3: u64, a4: u64, a5: u64, a6: u64) -> i64;
}

/// System call `number` with six arguments, made from the untrapped range (so it passes
/// whatever the thread's selector says): returns the kernel's value (`-errno` on failure).
/// errno is not touched.
///
/// # Safety
/// The call must be one whose arguments are valid for it, as the application's trapped call
/// was (the kernel checks pointers itself and returns `EFAULT`), and not one that returns
/// twice or on another stack (clone, fork, vfork, rt_sigreturn).
#[inline(always)]
pub unsafe fn syscall6(number: i64, args: [u64; 6]) -> i64 {
    let [a1, a2, a3, a4, a5, a6] = args;
    // Safety: see above; the stub only moves the arguments into the kernel's registers.
    unsafe { mlprof_trap_syscall(number, a1, a2, a3, a4, a5, a6) }
}

/// This process's id, without libc (its `getpid` may be hooked) and without trapping.
pub fn getpid() -> u64 {
    // Safety: no arguments.
    unsafe { syscall6(libc::SYS_getpid, [0; 6]) as u64 }
}

/// The calling thread's id, likewise.
pub fn gettid() -> u64 {
    // Safety: no arguments.
    unsafe { syscall6(libc::SYS_gettid, [0; 6]) as u64 }
}

/// `rt_sigaction(signal, new, old)` with the kernel's layout.
pub fn sigaction(signal: i32, new: Option<&KernelSigaction>, old: Option<&mut KernelSigaction>) -> i64 {
    let new = new.map_or(0, |n| n as *const KernelSigaction as u64);
    let old = old.map_or(0, |o| o as *mut KernelSigaction as u64);
    // Safety: both pointers are null or point to a KernelSigaction of ours.
    unsafe { syscall6(libc::SYS_rt_sigaction, [signal as u64, new, old, SIGSET_BYTES, 0, 0]) }
}

/// `rt_sigprocmask(how, new, old)` on the calling thread's 64-bit mask.
pub fn sigprocmask(how: i32, new: Option<&u64>, old: Option<&mut u64>) -> i64 {
    let new = new.map_or(0, |n| n as *const u64 as u64);
    let old = old.map_or(0, |o| o as *mut u64 as u64);
    // Safety: both pointers are null or point to a u64 of ours.
    unsafe { syscall6(libc::SYS_rt_sigprocmask, [how as u64, new, old, SIGSET_BYTES, 0, 0]) }
}

/// The bit of `signal` in a kernel signal mask.
pub const fn signal_bit(signal: i32) -> u64 {
    1 << (signal - 1)
}

/// Copies `len` bytes between this process's address `remote` and our buffer `local` with
/// `process_vm_readv`/`process_vm_writev` (`write`: towards `remote`): a bad address is an
/// error, not a fault. Returns whether all of it was copied.
fn copy_user(remote: u64, local: *mut u8, len: usize, write: bool) -> bool {
    let local_iov = libc::iovec { iov_base: local.cast(), iov_len: len };
    let remote_iov = libc::iovec { iov_base: remote as *mut core::ffi::c_void, iov_len: len };
    let number = if write { libc::SYS_process_vm_writev } else { libc::SYS_process_vm_readv };
    let pid = getpid();
    let args = [pid, &local_iov as *const _ as u64, 1, &remote_iov as *const _ as u64, 1, 0];
    // Safety: the iovecs describe our own buffer and the application's range; the kernel
    // checks the latter and reports EFAULT for a bad one.
    (unsafe { syscall6(number, args) }) == len as i64
}

/// Reads a `T` (plain data) from the application's address `from`; `None` when unreadable.
pub fn read_user<T: Copy + Default>(from: u64) -> Option<T> {
    let mut value = T::default();
    copy_user(from, (&mut value as *mut T).cast(), core::mem::size_of::<T>(), false).then_some(value)
}

/// Writes `value` (plain data) to the application's address `to`; false when unwritable.
pub fn write_user<T: Copy>(to: u64, value: &T) -> bool {
    copy_user(to, (value as *const T).cast_mut().cast(), core::mem::size_of::<T>(), true)
}

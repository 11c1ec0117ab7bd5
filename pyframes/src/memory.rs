//! Every read of the interpreter's memory goes through [`Memory`], so the same decoding runs
//! in-process ([`Direct`] on the hot path, [`Checked`] for the cold one), over synthetic images
//! in the unit tests, and over another live process in the tests against real interpreters.

/// Reads another piece of memory; `None` when it cannot be read (or must not be).
pub trait Memory {
    /// Fills `buf` from `addr`, all of it or nothing.
    fn read(&self, addr: usize, buf: &mut [u8]) -> Option<()>;

    #[inline]
    fn u64(&self, addr: usize) -> Option<u64> {
        let mut bytes = [0u8; 8];
        self.read(addr, &mut bytes)?;
        Some(u64::from_ne_bytes(bytes))
    }

    #[inline]
    fn u32(&self, addr: usize) -> Option<u32> {
        let mut bytes = [0u8; 4];
        self.read(addr, &mut bytes)?;
        Some(u32::from_ne_bytes(bytes))
    }

    #[inline]
    fn u8(&self, addr: usize) -> Option<u8> {
        let mut byte = [0u8; 1];
        self.read(addr, &mut byte)?;
        Some(u8::from_ne_bytes(byte))
    }

    /// The pointer stored at `addr`, when it is one this reader may follow.
    #[inline]
    fn pointer(&self, addr: usize) -> Option<usize> {
        let value = self.u64(addr)? as usize;
        plausible(value).then_some(value)
    }
}

/// The lowest address a process can map (the kernel's default `mmap_min_addr`).
const LOWEST: usize = 0x1_0000;
/// One past the highest user address: 47 bits on x86-64 (mappings above need a hint no
/// interpreter gives), up to 52 on aarch64.
#[cfg(target_arch = "x86_64")]
const HIGHEST: usize = 1 << 47;
#[cfg(not(target_arch = "x86_64"))]
const HIGHEST: usize = 1 << 52;

/// Whether `addr` could be a user-space address at all: not null, not in the first pages
/// (what a small integer mistaken for a pointer would be), not kernel space or garbage.
#[inline(always)]
pub fn plausible(addr: usize) -> bool {
    (LOWEST..HIGHEST).contains(&addr)
}

/// Whether `len` bytes from `addr` are all plausible.
#[inline(always)]
fn plausible_range(addr: usize, len: usize) -> bool {
    plausible(addr) && addr.checked_add(len).is_some_and(|end| end <= HIGHEST)
}

/// Plain loads of this process's memory after the cheap checks (plausible, aligned). For the
/// walk of the calling thread's own frames: they are the interpreter's live structures, which
/// cannot change under the thread that owns them while it runs C code, so the checks stand
/// guard against a torn-down or damaged chain, not against races. What they cannot catch is
/// a plausible pointer to unmapped memory; the walk's type check of every code object keeps
/// that to structures CPython itself points at.
#[derive(Clone, Copy, Debug, Default)]
pub struct Direct;

impl Memory for Direct {
    #[inline]
    fn read(&self, addr: usize, buf: &mut [u8]) -> Option<()> {
        if !plausible_range(addr, buf.len()) {
            return None;
        }
        // Safety: a plausible user range the interpreter points at (see the type's comment);
        // byte copies have no alignment requirement.
        unsafe { core::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) };
        Some(())
    }

    #[inline(always)]
    fn u64(&self, addr: usize) -> Option<u64> {
        if !plausible_range(addr, 8) || !addr.is_multiple_of(8) {
            return None;
        }
        // Safety: as for `read`; aligned. Volatile: the compiler may assume nothing of memory
        // the interpreter owns.
        Some(unsafe { core::ptr::read_volatile(addr as *const u64) })
    }

    #[inline(always)]
    fn u32(&self, addr: usize) -> Option<u32> {
        if !plausible_range(addr, 4) || !addr.is_multiple_of(4) {
            return None;
        }
        // Safety: as for `u64`.
        Some(unsafe { core::ptr::read_volatile(addr as *const u32) })
    }

    #[inline(always)]
    fn u8(&self, addr: usize) -> Option<u8> {
        if !plausible(addr) {
            return None;
        }
        // Safety: as for `u64`.
        Some(unsafe { core::ptr::read_volatile(addr as *const u8) })
    }
}

/// Copies of this process's memory that cannot fault: `process_vm_readv` on our own pid
/// reports an unmapped address as an error. One system call a read, so for the cold path
/// (describing a code object once), where a damaged pointer could otherwise be followed into
/// anything.
#[derive(Clone, Copy, Debug)]
pub struct Checked {
    pid: libc::pid_t,
}

impl Checked {
    /// The reader for this process (`own_pid`: its pid, which the caller knows how to get
    /// without a hooked call), or `None` where `process_vm_readv` is refused (a seccomp
    /// profile without it): tried once on memory known to be readable.
    pub fn new(own_pid: libc::pid_t) -> Option<Checked> {
        let reader = Checked { pid: own_pid };
        let probe = 0x5079_7468_6f6e_u64;
        (reader.u64(&probe as *const u64 as usize) == Some(probe)).then_some(reader)
    }
}

impl Memory for Checked {
    fn read(&self, addr: usize, buf: &mut [u8]) -> Option<()> {
        if buf.is_empty() {
            return Some(());
        }
        if !plausible_range(addr, buf.len()) {
            return None;
        }
        read_process(self.pid, addr, buf)
    }
}

/// Copies `buf.len()` bytes at `addr` of process `pid` (which may be this one).
pub fn read_process(pid: libc::pid_t, addr: usize, buf: &mut [u8]) -> Option<()> {
    let local = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // Safety: writes only into `buf`; a bad remote address is an error (EFAULT), not a signal.
    let got = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    (got >= 0 && got as usize == buf.len()).then_some(())
}

//! The processes' code maps and the unwinding of a sample's copied user stack: DWARF CFI from
//! each module's `.eh_frame` (framehop), frame pointers where a module has no CFI.

use std::sync::Arc;

use framehop::Unwinder;
use rustc_hash::FxHashMap;

use super::modules::{FileBytes, ModuleCache, ModuleFile};

#[cfg(target_arch = "x86_64")]
mod arch {
    pub(crate) use framehop::x86_64::{CacheX86_64 as Cache, UnwinderX86_64 as NativeUnwinder};
    /// `PERF_REG_X86_BP, SP, IP` (arch/x86/include/uapi/asm/perf_regs.h): the kernel writes
    /// the registers in the order of their bits, so a sample's regs are `[bp, sp, ip]`.
    pub(crate) const REGS_MASK: u64 = (1 << 6) | (1 << 7) | (1 << 8);

    /// (pc, sp, framehop's registers) from a sample's `[bp, sp, ip]`.
    pub(crate) fn registers(regs: [u64; 3]) -> (u64, u64, framehop::x86_64::UnwindRegsX86_64) {
        let [bp, sp, ip] = regs;
        (ip, sp, framehop::x86_64::UnwindRegsX86_64::new(ip, sp, bp))
    }
}

#[cfg(target_arch = "aarch64")]
mod arch {
    pub(crate) use framehop::aarch64::{CacheAarch64 as Cache, UnwinderAarch64 as NativeUnwinder};
    /// `PERF_REG_ARM64_X29 (fp), LR, SP, PC`: but three registers fit the parser, so the frame
    /// pointer, the link register and the stack pointer; the pc is the sample's ip.
    pub(crate) const REGS_MASK: u64 = (1 << 29) | (1 << 30) | (1 << 31);

    pub(crate) fn registers(regs: [u64; 3]) -> (u64, u64, framehop::aarch64::UnwindRegsAarch64) {
        let [fp, lr, sp] = regs;
        (0, sp, framehop::aarch64::UnwindRegsAarch64::new(lr, sp, fp))
    }
}

pub(crate) use arch::REGS_MASK;

/// The stack pointer of a sample's registers: where the copied user stack starts.
pub(crate) fn stack_pointer(regs: Option<[u64; 3]>) -> Option<u64> {
    regs.map(|regs| arch::registers(regs).1)
}

/// The most frames kept of one stack: deeper ones are recursion, or garbage a lost frame
/// pointer walks into; the bound keeps one sample's cost bounded.
pub(crate) const MAX_FRAMES: usize = 256;

/// One code mapping of a process, as the unwinder placed it.
#[derive(Clone)]
struct Placed {
    start: u64,
    end: u64,
}

/// A process's modules: framehop's unwinder over them, and their ranges (to replace what a
/// new mapping covers).
#[derive(Clone)]
struct Process {
    unwinder: arch::NativeUnwinder<FileBytes>,
    placed: Vec<Placed>,
}

impl Process {
    fn new() -> Process {
        Process { unwinder: arch::NativeUnwinder::new(), placed: Vec::new() }
    }
}

/// The code maps of every process sampled, and the unwinder's rule cache (shared: framehop
/// keys it by module generation, so one process's rules never serve another's).
pub(crate) struct Unwinding {
    processes: FxHashMap<u32, Process>,
    modules: ModuleCache,
    cache: arch::Cache,
    frames: Vec<u64>,
    /// Whether the last stack unwound reached its root (the unwinder ended it, rather than a
    /// frame it could not unwind, the end of the copied stack or [`MAX_FRAMES`]).
    complete: bool,
}

impl Unwinding {
    pub(crate) fn new() -> Unwinding {
        Unwinding {
            processes: FxHashMap::default(),
            modules: ModuleCache::default(),
            cache: arch::Cache::new(),
            frames: Vec::with_capacity(MAX_FRAMES),
            complete: false,
        }
    }

    /// `path` mapped executable at `start..end` of `pid` from file offset `pgoff`. Replaces
    /// the modules it overlaps (a `dlclose` followed by a `dlopen` at the same place; there
    /// is no munmap record). Returns the file when it could be loaded (its build id).
    pub(crate) fn map(
        &mut self,
        pid: u32,
        start: u64,
        end: u64,
        pgoff: u64,
        path: &[u8],
        inode: u64,
    ) -> Option<Arc<ModuleFile>> {
        let process = self.processes.entry(pid).or_insert_with(Process::new);
        let overlapped: Vec<u64> =
            process.placed.iter().filter(|p| p.start < end && start < p.end).map(|p| p.start).collect();
        for old in overlapped {
            process.unwinder.remove_module(old);
            process.placed.retain(|p| p.start != old);
        }
        let file = self.modules.get(path, inode)?;
        let bias = file.bias(start, pgoff, end - start)?;
        let name = String::from_utf8_lossy(path).into_owned();
        let module = framehop::Module::new(name, start..end, bias, file.section_info());
        process.unwinder.add_module(module);
        process.placed.push(Placed { start, end });
        Some(file)
    }

    /// `pid` exec'd: its old image is gone (the new one's mappings follow as records).
    pub(crate) fn exec(&mut self, pid: u32) {
        self.processes.insert(pid, Process::new());
    }

    /// `child` was forked from `parent`: it starts with a copy of the parent's mappings.
    pub(crate) fn fork(&mut self, parent: u32, child: u32) {
        let copy = self.processes.get(&parent).cloned().unwrap_or_else(Process::new);
        self.processes.insert(child, copy);
    }

    pub(crate) fn exit(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// The frames of a sample, leaf first: the sampled instruction, then return addresses
    /// (a return address points after its call: symbolize `address - 1`). Without registers
    /// (the kernel had none) the stack is just the ip. With them: whether the unwinding
    /// reached the stack's root.
    pub(crate) fn unwind(
        &mut self,
        pid: u32,
        ip: u64,
        regs: Option<[u64; 3]>,
        stack: &[u8],
    ) -> (&[u64], bool) {
        self.frames.clear();
        self.complete = false;
        let (Some(regs), Some(process)) = (regs, self.processes.get(&pid)) else {
            self.frames.push(ip);
            return (&self.frames, false);
        };
        let (pc, sp, unwind_regs) = arch::registers(regs);
        let pc = if pc == 0 { ip } else { pc };
        let mut read_stack = |address: u64| {
            let offset = address.checked_sub(sp).ok_or(())? as usize;
            let word = stack.get(offset..offset.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_ne_bytes(word.try_into().map_err(|_| ())?))
        };
        let mut frames = process.unwinder.iter_frames(pc, unwind_regs, &mut self.cache, &mut read_stack);
        while self.frames.len() < MAX_FRAMES {
            match frames.next() {
                Ok(Some(frame)) => self.frames.push(frame.address()),
                Ok(None) => {
                    self.complete = true;
                    break;
                }
                Err(_) => break,
            }
        }
        if self.frames.is_empty() {
            self.frames.push(ip);
        }
        (&self.frames, self.complete)
    }

    /// Whether `pid`'s code is known (its mappings were read, or it was forked from a process
    /// sampled, so an event it inherited samples it already).
    pub(crate) fn knows(&self, pid: u32) -> bool {
        self.processes.contains_key(&pid)
    }

    /// Files loaded (or found unloadable) so far.
    pub(crate) fn files_seen(&self) -> usize {
        self.modules.len()
    }
}

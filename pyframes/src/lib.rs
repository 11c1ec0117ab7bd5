//! CPython's frames, read through a [`memory::Memory`]: from a thread state to its Python
//! frames as (code object, instruction offset) pairs ([`walk`]), and from such a pair to file,
//! function and line ([`code`], [`linetable`]), for CPython 3.10–3.13 ([`layout`]).
//!
//! Two readers use it: libmlprof.so, on the calling thread's own frames at each recorded call
//! (`--sites`: plain loads, the hot path), and the collector, on a sampled thread's frames in
//! another process (`--sample`: `process_vm_readv`). Nothing here allocates, locks or panics;
//! anything that does not look like a live frame or code object ends a walk or a description.

#![deny(clippy::panic, clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic))]

pub mod code;
pub mod layout;
pub mod linetable;
pub mod memory;
pub mod walk;

#[cfg(test)]
mod tests;

pub use code::Described;

/// One Python frame: its code object's address and the byte offset of its current
/// instruction in that code object's bytecode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Frame {
    pub code: usize,
    pub offset: u32,
}

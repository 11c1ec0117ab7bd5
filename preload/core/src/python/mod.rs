//! STUB until the CPython frame reader lands (branch python-frames): no frames anywhere.

/// A Python frame of the calling thread.
#[derive(Clone, Copy, Default)]
pub struct Frame {
    pub code: usize,
    pub offset: u32,
    pub fingerprint: u64,
}

/// A frame's names, written into the caller's buffers.
pub struct Described {
    pub file_len: usize,
    pub function_len: usize,
    pub line: u32,
}

/// The calling thread's innermost Python frames.
pub fn frames(_out: &mut [Frame]) -> usize {
    0
}

/// File, function and line of `frame`.
pub fn describe(_frame: Frame, _file: &mut [u8], _function: &mut [u8]) -> Option<Described> {
    None
}

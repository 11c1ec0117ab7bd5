//! The cold path: what a (code object, offset) pair means — file, function, line — read from
//! the code object, which is immutable once made (its strings are immutable `str` objects,
//! its line table a `bytes` object), so a caller may cache the answer per pair and only
//! check [`identity`] on a hit.

use super::layout::{BYTES_DATA, BYTES_SIZE, FrameKind, Layout, OB_TYPE, UNICODE_LENGTH, UNICODE_STATE};
use super::linetable;
use super::memory::Memory;

/// The addresses of the type objects whose instances the reader trusts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Types {
    pub code: usize,
    pub unicode: usize,
    pub bytes: usize,
}

/// Where a code object's description was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Described {
    /// Bytes of the file name written to the start of the caller's buffer (UTF-8, cut at a
    /// character boundary when the buffer is too small).
    pub file_len: usize,
    /// Bytes of the function's name (its qualified name from 3.11: `Class.method`).
    pub func_len: usize,
    /// The line, from the line table; 0 where the instruction has none.
    pub line: u32,
}

/// The longest line table read (a function of some 100,000 instructions).
const MAX_TABLE: usize = 1 << 20;
/// The longest string read, in code points.
const MAX_STRING: usize = 1 << 20;

/// A value that changes when the object at `code` is no longer the code object a cache entry
/// was made for (its address reused after it was freed): its type, file name, name and line
/// table objects and first line. 0 when `code` is not a code object now.
#[inline]
pub fn identity<M: Memory + ?Sized>(mem: &M, layout: &Layout, code_type: usize, code: usize) -> u64 {
    let field = |offset: u32| mem.u64(code.wrapping_add(offset as usize));
    if mem.u64(code.wrapping_add(OB_TYPE)) != Some(code_type as u64) {
        return 0;
    }
    let parts = [
        field(layout.code_filename),
        field(layout.code_name),
        field(layout.code_linetable),
        mem.u32(code.wrapping_add(layout.code_firstlineno as usize)).map(u64::from),
    ];
    let mut hash = 0x9e37_79b9_7f4a_7c15_u64;
    for part in parts {
        let Some(part) = part else { return 0 };
        hash = (hash ^ part).wrapping_mul(0x0100_0000_01b3).rotate_left(23);
    }
    hash | 1
}

/// File, function and line of byte `offset` into `code`, names into the buffers given.
/// `None` when `code` is not a code object or its strings or line table cannot be read.
pub fn describe<M: Memory + ?Sized>(
    mem: &M,
    layout: &Layout,
    types: &Types,
    code: usize,
    offset: u32,
    file: &mut [u8],
    func: &mut [u8],
) -> Option<Described> {
    let named = names(mem, layout, types, code, file, func)?;
    let mut bytes = Bytes::new(mem, named.table, named.table_len);
    let line = line_at(layout, &mut bytes, named.firstlineno, offset);
    if bytes.failed {
        return None;
    }
    Some(Described { file_len: named.file_len, func_len: named.func_len, line: line.unwrap_or(0) })
}

/// What a code object holds for every offset into it: its names (written into the caller's
/// buffers), its first line, and where its line table's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Named {
    pub file_len: usize,
    pub func_len: usize,
    pub firstlineno: i32,
    /// The line table's bytes: address and length.
    pub table: usize,
    pub table_len: usize,
}

/// [`describe`]'s reading of `code` without an offset, for a reader that keeps the line table
/// (a copy read once) and finds each offset's line with [`line_at`].
pub fn names<M: Memory + ?Sized>(
    mem: &M,
    layout: &Layout,
    types: &Types,
    code: usize,
    file: &mut [u8],
    func: &mut [u8],
) -> Option<Named> {
    if mem.u64(code.wrapping_add(OB_TYPE))? != types.code as u64 {
        return None;
    }
    let field = |offset: u32| mem.pointer(code.wrapping_add(offset as usize));
    let file_len = string(mem, layout, types.unicode, field(layout.code_filename)?, file)?;
    let func_len = string(mem, layout, types.unicode, field(layout.code_name)?, func)?;
    let firstlineno = mem.u32(code.wrapping_add(layout.code_firstlineno as usize))? as i32;
    let table = field(layout.code_linetable)?;
    if mem.u64(table.wrapping_add(OB_TYPE))? != types.bytes as u64 {
        return None;
    }
    let table_len = mem.u64(table.wrapping_add(BYTES_SIZE))? as usize;
    if table_len > MAX_TABLE {
        return None;
    }
    Some(Named { file_len, func_len, firstlineno, table: table.wrapping_add(BYTES_DATA), table_len })
}

/// The line of byte `offset` from a line table's bytes, in `layout`'s format.
pub fn line_at(
    layout: &Layout,
    table: impl Iterator<Item = u8>,
    firstlineno: i32,
    offset: u32,
) -> Option<u32> {
    match layout.kind {
        FrameKind::Object => linetable::line_3_10(table, firstlineno, offset),
        FrameKind::Interpreter => linetable::line_pep657(table, firstlineno, offset),
    }
}

/// A `str` object as UTF-8 into `buf` (cut at a character boundary); its length. Only compact
/// strings (all that code objects hold): ASCII ones are copied as they are, others encoded
/// from their 1, 2 or 4 bytes a code point (their UTF-8 copy is made only on demand, so it
/// may not exist). `unicode_type` 0 skips the type check.
pub fn string<M: Memory + ?Sized>(
    mem: &M,
    layout: &Layout,
    unicode_type: usize,
    obj: usize,
    buf: &mut [u8],
) -> Option<usize> {
    if unicode_type != 0 && mem.u64(obj.wrapping_add(OB_TYPE))? != unicode_type as u64 {
        return None;
    }
    let state = mem.u32(obj.wrapping_add(UNICODE_STATE))?;
    let length = mem.u64(obj.wrapping_add(UNICODE_LENGTH))? as usize;
    let (kind, compact, ascii) = ((state >> 2) & 7, state & (1 << 5) != 0, state & (1 << 6) != 0);
    if !compact || length > MAX_STRING {
        return None;
    }
    if ascii {
        let len = length.min(buf.len());
        mem.read(obj.wrapping_add(layout.ascii_size as usize), buf.get_mut(..len)?)?;
        return Some(len);
    }
    let width = match kind {
        1 | 2 | 4 => kind as usize,
        _ => return None,
    };
    encode_utf8(mem, obj.wrapping_add(layout.compact_size as usize), width, length, buf)
}

/// `length` code points of `width` bytes each from `data`, as UTF-8 into `buf`, as many as
/// fit whole; the bytes written. A lone surrogate (which `str` may hold) becomes U+FFFD.
fn encode_utf8<M: Memory + ?Sized>(
    mem: &M,
    data: usize,
    width: usize,
    length: usize,
    buf: &mut [u8],
) -> Option<usize> {
    const CHUNK: usize = 256;
    let mut chunk = [0u8; CHUNK];
    let (mut done, mut written) = (0, 0);
    while done < length {
        let count = (length - done).min(CHUNK / width);
        let raw = chunk.get_mut(..count * width)?;
        mem.read(data.wrapping_add(done * width), raw)?;
        for unit in raw.chunks_exact(width) {
            let point = match *unit {
                [a] => u32::from(a),
                [a, b] => u32::from(u16::from_ne_bytes([a, b])),
                [a, b, c, d] => u32::from_ne_bytes([a, b, c, d]),
                _ => return None,
            };
            let ch = char::from_u32(point).unwrap_or(char::REPLACEMENT_CHARACTER);
            let Some(room) = buf.get_mut(written..written + ch.len_utf8()) else {
                return Some(written);
            };
            ch.encode_utf8(room);
            written += ch.len_utf8();
        }
        done += count;
    }
    Some(written)
}

/// The bytes from `addr` on, read a piece at a time; stops (and says so) at the first piece
/// that cannot be read.
struct Bytes<'m, M: ?Sized> {
    mem: &'m M,
    addr: usize,
    left: usize,
    piece: [u8; 64],
    at: usize,
    len: usize,
    failed: bool,
}

impl<'m, M: Memory + ?Sized> Bytes<'m, M> {
    fn new(mem: &'m M, addr: usize, len: usize) -> Self {
        Bytes { mem, addr, left: len, piece: [0; 64], at: 0, len: 0, failed: false }
    }
}

impl<M: Memory + ?Sized> Iterator for Bytes<'_, M> {
    type Item = u8;

    fn next(&mut self) -> Option<u8> {
        if self.at == self.len {
            let len = self.left.min(self.piece.len());
            if len == 0 || self.failed {
                return None;
            }
            if self.mem.read(self.addr, self.piece.get_mut(..len)?).is_none() {
                self.failed = true;
                return None;
            }
            (self.addr, self.left, self.at, self.len) = (self.addr + len, self.left - len, 0, len);
        }
        let byte = *self.piece.get(self.at)?;
        self.at += 1;
        Some(byte)
    }
}

//! Synthetic interpreter memory: objects laid out as a version's [`Layout`] says, in one
//! buffer at a plausible address, read through [`Memory`] like any other.

use std::cell::RefCell;

use crate::code::Types;
use crate::layout::{self, FrameKind, Layout, NONE};
use crate::linetable::encode;
use crate::memory::Memory;

/// Bytes at `base..base + len`; everything else is unmapped.
pub struct Image {
    base: usize,
    bytes: RefCell<Vec<u8>>,
}

impl Image {
    pub fn alloc(&mut self, size: usize) -> usize {
        let bytes = self.bytes.get_mut();
        let at = bytes.len().next_multiple_of(16);
        bytes.resize(at + size.max(8), 0);
        self.base + at
    }

    pub fn end(&self) -> usize {
        self.base + self.bytes.borrow().len()
    }

    pub fn put(&mut self, addr: usize, data: &[u8]) {
        let at = addr - self.base;
        self.bytes.get_mut()[at..at + data.len()].copy_from_slice(data);
    }

    pub fn put_u64(&mut self, addr: usize, value: u64) {
        self.put(addr, &value.to_ne_bytes());
    }

    pub fn get_u64(&self, addr: usize) -> u64 {
        self.u64(addr).expect("inside the image")
    }
}

impl Memory for Image {
    fn read(&self, addr: usize, buf: &mut [u8]) -> Option<()> {
        let bytes = self.bytes.borrow();
        let at = addr.checked_sub(self.base)?;
        buf.copy_from_slice(bytes.get(at..at.checked_add(buf.len())?)?);
        Some(())
    }
}

/// An image holding one version's objects.
pub struct World {
    pub image: Image,
    pub layout: Layout,
    pub types: Types,
}

impl World {
    pub fn new(layout: Layout) -> World {
        let mut image = Image { base: 0x5555_0000_0000, bytes: RefCell::new(Vec::new()) };
        let mut type_named = |name: &[u8]| {
            let ty = image.alloc(64);
            let text = image.alloc(name.len() + 1);
            image.put(text, name);
            image.put_u64(ty + layout::TP_NAME, text as u64);
            ty
        };
        let types =
            Types { code: type_named(b"code"), unicode: type_named(b"str"), bytes: type_named(b"bytes") };
        World { image, layout, types }
    }

    fn object(&mut self, ty: usize, size: usize) -> usize {
        let obj = self.image.alloc(size);
        self.image.put_u64(obj + layout::OB_TYPE, ty as u64);
        obj
    }

    /// A compact `str`: ASCII bytes after the short head, else 1, 2 or 4 bytes a code point
    /// after the long one (with no UTF-8 copy, as for most strings).
    pub fn string(&mut self, text: &str) -> usize {
        let points: Vec<u32> = text.chars().map(u32::from).collect();
        let width = match points.iter().max().copied().unwrap_or(0) {
            0..=0x7f => 0,
            0x80..=0xff => 1,
            0x100..=0xffff => 2,
            _ => 4,
        };
        let (head, kind) = match width {
            0 => (self.layout.ascii_size as usize, 1),
            w => (self.layout.compact_size as usize, w),
        };
        let obj = self.object(self.types.unicode, head + (points.len() + 1) * kind);
        self.image.put_u64(obj + layout::UNICODE_LENGTH, points.len() as u64);
        let state = (kind << 2) | (1 << 5) | if width == 0 { 1 << 6 } else { 0 };
        self.image.put(obj + layout::UNICODE_STATE, &(state as u32).to_ne_bytes());
        for (i, &point) in points.iter().enumerate() {
            self.image.put(obj + head + i * kind, &point.to_ne_bytes()[..kind]);
        }
        obj
    }

    pub fn bytes(&mut self, data: &[u8]) -> usize {
        let obj = self.object(self.types.bytes, layout::BYTES_DATA + data.len() + 1);
        self.image.put_u64(obj + layout::BYTES_SIZE, data.len() as u64);
        self.image.put(obj + layout::BYTES_DATA, data);
        obj
    }

    /// A code object whose line table maps `ranges` (table units: bytes in 3.10, code units
    /// after) to lines.
    pub fn code(&mut self, file: &str, name: &str, firstlineno: i32, ranges: &[(u32, Option<i32>)]) -> usize {
        let l = self.layout;
        let table = match l.kind {
            FrameKind::Object => encode::table_3_10(firstlineno, ranges),
            FrameKind::Interpreter => encode::table_pep657(firstlineno, ranges),
        };
        let (file, name, table) = (self.string(file), self.string(name), self.bytes(&table));
        let code = self.object(self.types.code, 256);
        self.image.put_u64(code + l.code_filename as usize, file as u64);
        self.image.put_u64(code + l.code_name as usize, name as u64);
        self.image.put_u64(code + l.code_linetable as usize, table as u64);
        self.image.put(code + l.code_firstlineno as usize, &firstlineno.to_ne_bytes());
        code
    }

    /// A frame running `code` at byte `offset` (`None`: not started), called by `previous`.
    pub fn frame(&mut self, code: usize, offset: Option<u32>, previous: usize, owner: u8) -> usize {
        let l = self.layout;
        let frame = self.image.alloc(128);
        self.image.put_u64(frame + l.frame_code as usize, code as u64);
        self.image.put_u64(frame + l.frame_previous as usize, previous as u64);
        match l.kind {
            FrameKind::Object => {
                let lasti = offset.map_or(-1, |offset| offset as i32 / 2);
                self.image.put(frame + l.frame_instr as usize, &lasti.to_ne_bytes());
            }
            FrameKind::Interpreter => {
                let start = code + l.code_start as usize;
                // 3.11/3.12 point one code unit before the start; 3.13 at it.
                let not_started = if l.minor >= 13 { start } else { start - 2 };
                let instr = offset.map_or(not_started, |offset| start + offset as usize);
                self.image.put_u64(frame + l.frame_instr as usize, instr as u64);
            }
        }
        if l.frame_owner != NONE {
            self.image.put(frame + l.frame_owner as usize, &[owner]);
        }
        frame
    }

    /// A thread state whose innermost frame is `innermost` (0: none).
    pub fn thread(&mut self, innermost: usize) -> usize {
        let l = self.layout;
        let tstate = self.image.alloc(256);
        let mut holder = innermost;
        if l.cframe_current != NONE {
            holder = self.image.alloc(32);
            self.image.put_u64(holder + l.cframe_current as usize, innermost as u64);
        }
        self.image.put_u64(tstate + l.tstate_frame as usize, holder as u64);
        tstate
    }

    pub fn innermost(&self, tstate: usize) -> usize {
        let l = self.layout;
        let mut frame = self.image.get_u64(tstate + l.tstate_frame as usize) as usize;
        if l.cframe_current != NONE {
            frame = self.image.get_u64(frame + l.cframe_current as usize) as usize;
        }
        frame
    }

    /// A `_PyRuntime` that starts with 3.13's `_Py_DebugOffsets` (the values of 3.13.0).
    pub fn debug_offsets(&mut self, cookie: [u8; 8], version: u64, free_threaded: u64) -> usize {
        let runtime = self.image.alloc(600);
        self.image.put(runtime, &cookie);
        let fields: [(usize, u64); 31] = [
            (8, version),
            (16, free_threaded),
            (24, 3000),
            (40, 632),
            (48, 8000),
            (72, 7344),
            (152, 400),
            (168, 8),
            (184, 72),
            (200, 160),
            (224, 80),
            (232, 8),
            (240, 0),
            (248, 56),
            (264, 70),
            (272, 208),
            (280, 112),
            (288, 120),
            (296, 128),
            (304, 136),
            (312, 68),
            (344, 200),
            (352, 16),
            (360, 8),
            (376, 24),
            (520, 16),
            (528, 32),
            (536, 56),
            (544, 32),
            (552, 16),
            (560, 40),
        ];
        for (at, value) in fields {
            self.image.put_u64(runtime + at, value);
        }
        runtime
    }
}

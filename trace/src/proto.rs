//! The few protobuf wire-format primitives the Perfetto writer needs, hand-written: varints,
//! fixed 64-bit fields and length-delimited fields, appended to a `Vec<u8>`.
//!
//! Why not `prost`: the writer emits about 40 fields of 12 messages, and its hot path writes a
//! slice as bytes copied into a per-thread buffer, then wrapped in a packet whose length is
//! known up front. Message structs would be built, measured and encoded per event, and
//! repeated fields (annotations) are `Vec`s, i.e. allocations per event. The wire format
//! itself is small and frozen; the field numbers live in [`crate::perfetto::field`], checked
//! against Perfetto's published schema by the decoding test (tests/scripts/perfetto_check.py).

/// Wire types.
pub const VARINT: u32 = 0;
pub const FIXED64: u32 = 1;
pub const LEN: u32 = 2;

/// Bytes `value` takes as a varint.
#[inline]
pub fn varint_len(value: u64) -> usize {
    // 1 byte per 7 bits; 0 still takes one byte.
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

#[inline]
pub fn put_varint(buf: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        buf.push(value as u8 | 0x80);
        value >>= 7;
    }
    buf.push(value as u8);
}

#[inline]
pub fn put_tag(buf: &mut Vec<u8>, field: u32, wire: u32) {
    put_varint(buf, u64::from(field << 3 | wire));
}

/// Bytes of the tag of `field`.
#[inline]
pub fn tag_len(field: u32) -> usize {
    varint_len(u64::from(field << 3))
}

/// A varint field (uint64, uint32, int32 of a non-negative value, bool, enum). int64 fields
/// take negative values as their two's complement: 10 bytes.
#[inline]
pub fn put_uint(buf: &mut Vec<u8>, field: u32, value: u64) {
    put_tag(buf, field, VARINT);
    put_varint(buf, value);
}

#[inline]
pub fn put_fixed64(buf: &mut Vec<u8>, field: u32, value: u64) {
    put_tag(buf, field, FIXED64);
    buf.extend_from_slice(&value.to_le_bytes());
}

#[inline]
pub fn put_bytes(buf: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_tag(buf, field, LEN);
    put_varint(buf, bytes.len() as u64);
    buf.extend_from_slice(bytes);
}

/// A nested message written by `body` in place: the length is reserved as one byte and the
/// body moved along in the rare case it needs more (bodies here are mostly under 128 bytes).
#[inline]
pub fn put_message(buf: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    put_tag(buf, field, LEN);
    let at = buf.len();
    buf.push(0);
    body(buf);
    let len = buf.len() - at - 1;
    let extra = varint_len(len as u64) - 1;
    if extra > 0 {
        buf.splice(at + 1..at + 1, std::iter::repeat_n(0, extra));
    }
    let mut value = len as u64;
    let mut i = at;
    loop {
        let byte = value as u8 & 0x7f;
        value >>= 7;
        if value == 0 {
            buf[i] = byte;
            break;
        }
        buf[i] = byte | 0x80;
        i += 1;
    }
}

/// Bytes reserved past an [`append`]'s `max`: room for a [`Spare`] to write a varint or a
/// short template into a fixed-size window (one bounds check, not one a byte) and keep only
/// the bytes it needed.
const SLACK: usize = 16;

/// Appends what `write` writes through a [`Spare`], at most `max` bytes, to `buf`.
///
/// The hot paths write a few dozen bytes per event; `Vec::push` checks the capacity and
/// stores the length for each of them, this reserves once and sets the length once.
#[inline]
pub fn append<R>(buf: &mut Vec<u8>, max: usize, write: impl FnOnce(&mut Spare<'_>) -> R) -> R {
    buf.reserve(max + SLACK);
    let len = buf.len();
    let mut spare = Spare { bytes: &mut buf.spare_capacity_mut()[..max + SLACK], n: 0 };
    let result = write(&mut spare);
    let n = spare.n;
    // Checked once here rather than after each write: every write goes through a bounds-checked
    // window of `bytes` (which reaches SLACK past `max`), so memory stays safe in between, and
    // a writer that went past `max` (a wrong bound at a caller) still panics.
    assert!(n <= max, "a Spare written past its {max} bytes");
    // Safety: every `Spare` method writes bytes from `n` on and then advances `n` over bytes it
    // wrote (or rewrites a byte below `n`), so the first `n` bytes of the spare capacity after
    // `len` are initialized; `n <= max + SLACK`, within the capacity reserved.
    unsafe { buf.set_len(len + n) };
    result
}

/// Writes `value` as a varint into `window` from `at` (10 bytes there at least); returns where
/// it ends.
#[inline(always)]
fn varint_into(window: &mut [std::mem::MaybeUninit<u8>], at: usize, mut value: u64) -> usize {
    let mut i = at;
    while value >= 0x80 && i < at + 9 {
        window[i].write(value as u8 | 0x80);
        value >>= 7;
        i += 1;
    }
    window[i].write(value as u8);
    i + 1
}

/// The spare capacity of a `Vec<u8>`, written from its start ([`append`]). Writing past the
/// `max` given to `append` panics (at the end of `append`, or at once past the slack).
pub struct Spare<'a> {
    /// `max` bytes and [`SLACK`] more.
    bytes: &'a mut [std::mem::MaybeUninit<u8>],
    n: usize,
}

impl Spare<'_> {
    #[inline(always)]
    pub fn byte(&mut self, byte: u8) {
        self.bytes[self.n].write(byte);
        self.n += 1;
    }

    #[inline(always)]
    pub fn varint(&mut self, value: u64) {
        // At most 10 bytes, written into a window checked once.
        self.n += varint_into(&mut self.bytes[self.n..self.n + 10], 0, value);
    }

    /// The first `len` bytes of `bytes` (`N` ≤ [`SLACK`]): all `N` are copied, a fixed-size
    /// copy, and `len` kept.
    #[inline(always)]
    pub fn bytes_padded<const N: usize>(&mut self, bytes: &[u8; N], len: usize) {
        const { assert!(N <= SLACK) };
        let Some(window) = self.bytes[self.n..].first_chunk_mut::<N>() else {
            panic!("a Spare written past its slack");
        };
        *window = bytes.map(std::mem::MaybeUninit::new);
        self.n += len.min(N);
    }

    #[inline(always)]
    pub fn bytes(&mut self, bytes: &[u8]) {
        for (to, &byte) in self.bytes[self.n..self.n + bytes.len()].iter_mut().zip(bytes) {
            to.write(byte);
        }
        self.n += bytes.len();
    }

    /// A varint field.
    #[inline(always)]
    pub fn uint(&mut self, field: u32, value: u64) {
        self.varint(u64::from(field << 3 | VARINT));
        self.varint(value);
    }

    /// Opens a nested message whose length will fit one byte (under 128): returns where its
    /// length goes, for [`Spare::close_short`].
    #[inline(always)]
    pub fn open_short(&mut self, field: u32) -> usize {
        self.bytes_padded(&[(field << 3 | LEN) as u8, 0], 2);
        self.n - 1
    }

    /// A short message around a varint: `head` (its tag, a length byte filled in here, the
    /// start of its body: the first `head_len` of its `H` bytes), `value`, then `tail`, in one
    /// window, its length known once the varint is written. A debug annotation from a template
    /// (no tail), a slice's END packet.
    #[inline(always)]
    pub fn varint_message<const H: usize, const T: usize>(
        &mut self,
        head: &[u8; H],
        head_len: usize,
        value: u64,
        tail: &[u8; T],
    ) {
        const { assert!(H >= 2) };
        let start = self.n;
        self.varint_between(head, head_len, value, tail);
        self.bytes[start + 1].write((self.n - start - 2) as u8);
    }

    /// `head` (the first `head_len` of its `H` bytes), `value` as a varint, then `tail`, in
    /// one window.
    #[inline(always)]
    pub fn varint_between<const H: usize, const T: usize>(
        &mut self,
        head: &[u8; H],
        head_len: usize,
        value: u64,
        tail: &[u8; T],
    ) {
        let Some(window) = self.bytes.get_mut(self.n..self.n + H + 10 + T) else {
            panic!("a Spare written past its slack");
        };
        if let Some(start) = window.first_chunk_mut::<H>() {
            *start = head.map(std::mem::MaybeUninit::new);
        }
        let i = varint_into(window, head_len.min(H), value);
        if let Some(end) = window.get_mut(i..).and_then(|rest| rest.first_chunk_mut::<T>()) {
            *end = tail.map(std::mem::MaybeUninit::new);
        }
        self.n += i + T;
    }

    /// Closes the message opened at `at`.
    #[inline(always)]
    pub fn close_short(&mut self, at: usize) {
        let len = self.n - at - 1;
        assert!(len < 0x80, "a short message of {len} bytes");
        self.bytes[at].write(len as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_match_the_wire_format() {
        for (value, bytes) in [
            (0u64, &[0u8][..]),
            (1, &[1]),
            (127, &[0x7f]),
            (128, &[0x80, 1]),
            (300, &[0xac, 2]),
            (u64::MAX, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1]),
        ] {
            let mut buf = Vec::new();
            put_varint(&mut buf, value);
            assert_eq!(buf, bytes, "{value}");
            assert_eq!(varint_len(value), bytes.len(), "{value}");
        }
    }

    #[test]
    fn spare_writes_what_vec_writes() {
        let mut expected = vec![1, 2];
        put_uint(&mut expected, 3, 300);
        put_message(&mut expected, 4, |m| put_uint(m, 17, u64::MAX));
        let mut buf = vec![1, 2];
        let n = append(&mut buf, 32, |w| {
            w.uint(3, 300);
            let at = w.open_short(4);
            w.uint(17, u64::MAX);
            w.close_short(at);
            w.n
        });
        assert_eq!((buf, n), (expected.clone(), expected.len() - 2));
    }

    #[test]
    fn a_template_annotation_is_the_message_written_field_by_field() {
        // A debug annotation's prefix (tag 4, length, key iid field 1 = 5, value tag of field 3)
        // padded to 12 bytes, then values of every varint length.
        let prefix = [4 << 3 | LEN as u8, 0, 1 << 3, 5, 3 << 3, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee];
        for value in [0, 1, 127, 128, 300, 1 << 40, u64::MAX] {
            let mut expected = vec![9];
            put_message(&mut expected, 4, |m| {
                put_uint(m, 1, 5);
                put_tag(m, 3, VARINT);
                put_varint(m, value);
            });
            let mut buf = vec![9];
            append(&mut buf, 22, |w| w.varint_message(&prefix, 5, value, &[]));
            assert_eq!(buf, expected, "{value}");
        }
    }

    #[test]
    fn a_varint_message_is_the_message_written_field_by_field() {
        // An END packet's shape: packet tag and length, timestamp field, then a fixed tail.
        let tail = [10 << 3, 7, 11 << 3 | LEN as u8, 2, 9 << 3, 2];
        for value in [0, 1, 127, 128, 300, 1 << 40, u64::MAX] {
            let mut expected = vec![9];
            put_message(&mut expected, 1, |m| {
                put_uint(m, 8, value);
                m.extend_from_slice(&tail);
            });
            let mut buf = vec![9];
            append(&mut buf, 19, |w| w.varint_message(&[1 << 3 | LEN as u8, 0, 8 << 3], 3, value, &tail));
            assert_eq!(buf, expected, "{value}");
        }
    }

    #[test]
    #[should_panic]
    fn spare_cannot_write_past_its_reservation() {
        append(&mut Vec::new(), 2, |w| w.varint(u64::MAX));
    }

    #[test]
    fn nested_messages_get_their_length_whatever_its_size() {
        for n in [0usize, 5, 127, 128, 300, 20_000] {
            let mut buf = vec![9];
            put_message(&mut buf, 4, |b| b.extend(std::iter::repeat_n(7u8, n)));
            let mut expected = vec![9, 4 << 3 | 2];
            put_varint(&mut expected, n as u64);
            expected.extend(std::iter::repeat_n(7u8, n));
            assert_eq!(buf, expected, "{n}");
        }
    }
}

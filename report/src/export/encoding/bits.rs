//! Parquet's bit-level encodings, written by hand: the RLE / bit-packing hybrid (dictionary
//! indexes, definition levels) and DELTA_BINARY_PACKED (times and durations), with their
//! varints.

/// Values per DELTA_BINARY_PACKED block, and miniblocks per block.
const DELTA_BLOCK: usize = 128;
const DELTA_MINIBLOCKS: usize = 4;

/// Appends `values` DELTA_BINARY_PACKED (Parquet's format: a header, then blocks of 128
/// deltas as a minimum delta and 4 bit-packed miniblocks of 32, each its own width); returns
/// their minimum and maximum, if any.
pub(super) fn delta_binary_packed(values: &[i64], out: &mut Vec<u8>) -> Option<(i64, i64)> {
    const MINI: usize = DELTA_BLOCK / DELTA_MINIBLOCKS;
    uleb128(DELTA_BLOCK as u64, out);
    uleb128(DELTA_MINIBLOCKS as u64, out);
    uleb128(values.len() as u64, out);
    let Some(&first) = values.first() else {
        uleb128(0, out);
        return None;
    };
    uleb128(zigzag(first), out);
    let (mut min, mut max) = (first, first);
    let mut deltas = [0i64; DELTA_BLOCK];
    let mut prev = first;
    for block in values[1..].chunks(DELTA_BLOCK) {
        let mut min_delta = i64::MAX;
        for (d, &v) in deltas.iter_mut().zip(block) {
            *d = v.wrapping_sub(prev);
            prev = v;
            min_delta = min_delta.min(*d);
            (min, max) = (min.min(v), max.max(v));
        }
        uleb128(zigzag(min_delta), out);
        let deltas = &mut deltas[..block.len()];
        let mut widths = [0u8; DELTA_MINIBLOCKS];
        for (width, mini) in widths.iter_mut().zip(deltas.chunks_mut(MINI)) {
            let mut any = 0u64;
            for d in mini.iter_mut() {
                *d = d.wrapping_sub(min_delta);
                any |= *d as u64;
            }
            *width = (64 - any.leading_zeros()) as u8;
        }
        // Widths of miniblocks the last block does not need are written (as 0), their
        // bodies not.
        out.extend_from_slice(&widths);
        for (&width, mini) in widths.iter().zip(deltas.chunks(MINI)) {
            bit_pack(mini, width, MINI, out);
        }
    }
    Some((min, max))
}

/// Bit-packs `values` (as u64) in `width` bits each, least significant first, padded with
/// zeros to `count` values.
#[inline]
fn bit_pack(values: &[i64], width: u8, count: usize, out: &mut Vec<u8>) {
    if width == 0 {
        return;
    }
    let (mut acc, mut bits) = (0u128, 0u32);
    for i in 0..count {
        acc |= (values.get(i).map_or(0, |&v| v as u64) as u128) << bits;
        bits += width as u32;
        if bits >= 64 {
            out.extend_from_slice(&(acc as u64).to_le_bytes());
            acc >>= 64;
            bits -= 64;
        }
    }
    out.extend_from_slice(&(acc as u64).to_le_bytes()[..bits.div_ceil(8) as usize]);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Bits needed for `max`.
pub(super) fn bit_width(max: u32) -> u8 {
    (32 - max.leading_zeros()) as u8
}

/// Parquet's RLE / bit-packing hybrid encoding of `values` as `width`-bit integers (no
/// length prefix): a run of 8 or more equal values starting at a group of 8 is one RLE run,
/// the rest is bit-packed in groups of 8 (the last group padded with zeros).
pub(super) fn rle_hybrid<T: Copy + PartialEq>(
    values: &[T],
    width: u8,
    out: &mut Vec<u8>,
    as_u32: impl Fn(T) -> u32,
) {
    let value_bytes = (width as usize).div_ceil(8);
    let mut at = 0;
    // The bit-packed run being written: where its one-byte header is, and its groups so far.
    let mut packed: Option<(usize, u8)> = None;
    while at < values.len() {
        let group = &values[at..(at + 8).min(values.len())];
        if group.len() == 8 && group.iter().all(|&v| v == group[0]) {
            let mut end = at + 8;
            while end < values.len() && values[end] == group[0] {
                end += 1;
            }
            packed = None;
            uleb128(((end - at) as u64) << 1, out);
            out.extend_from_slice(&as_u32(group[0]).to_le_bytes()[..value_bytes]);
            at = end;
            continue;
        }
        let (header, groups) = match packed {
            Some((header, groups)) if groups < 63 => (header, groups + 1),
            _ => {
                out.push(0);
                (out.len() - 1, 1)
            }
        };
        packed = Some((header, groups));
        out[header] = (groups << 1) | 1;
        if width <= 16 {
            // The group's 8 × width bits (width bytes) at once: each half of four values in
            // a u64, joined once (a u128 shift per value was half of the page encoding).
            let shift = width as u32;
            let half = |values: &[T]| {
                values
                    .iter()
                    .enumerate()
                    .fold(0u64, |acc, (i, &v)| acc | (as_u32(v) as u64) << (i as u32 * shift))
            };
            let (low, high) = group.split_at(group.len().min(4));
            let acc = half(low) as u128 | (half(high) as u128) << (4 * shift);
            out.extend_from_slice(&acc.to_le_bytes()[..width as usize]);
        } else {
            let (mut acc, mut bits) = (0u64, 0u32);
            for i in 0..8 {
                acc |= (group.get(i).map_or(0, |&v| as_u32(v)) as u64) << bits;
                bits += width as u32;
                while bits >= 8 {
                    out.push(acc as u8);
                    acc >>= 8;
                    bits -= 8;
                }
            }
        }
        at += group.len();
    }
}

fn uleb128(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes the hybrid encoding back (a reference for the tests).
    fn decode(mut bytes: &[u8], width: u8, n: usize) -> Vec<u32> {
        let mut out = Vec::new();
        let value_bytes = (width as usize).div_ceil(8);
        while out.len() < n {
            let (mut header, mut shift) = (0u64, 0);
            loop {
                let b = bytes[0];
                bytes = &bytes[1..];
                header |= ((b & 0x7f) as u64) << shift;
                shift += 7;
                if b < 0x80 {
                    break;
                }
            }
            if header & 1 == 0 {
                let mut v = [0u8; 4];
                v[..value_bytes].copy_from_slice(&bytes[..value_bytes]);
                bytes = &bytes[value_bytes..];
                out.extend(std::iter::repeat_n(u32::from_le_bytes(v), (header >> 1) as usize));
            } else {
                let count = (header >> 1) as usize * 8;
                let (mut acc, mut bits) = (0u64, 0u32);
                for _ in 0..count {
                    while bits < width as u32 {
                        acc |= (bytes[0] as u64) << bits;
                        bytes = &bytes[1..];
                        bits += 8;
                    }
                    out.push((acc & ((1u64 << width) - 1)) as u32);
                    acc >>= width;
                    bits -= width as u32;
                }
            }
        }
        out.truncate(n);
        out
    }

    #[test]
    fn the_hybrid_encoding_round_trips() {
        let mut seed = 7u64;
        for width in [1u8, 3, 4, 8, 15, 16, 17, 32] {
            for n in [0, 1, 7, 8, 9, 100, 1000, 5000] {
                let max = if width == 32 { u32::MAX as u64 } else { (1u64 << width) - 1 };
                let values: Vec<u32> = (0..n)
                    .map(|i| {
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        // Runs of repeats, and random stretches.
                        if (i / 37) % 2 == 0 {
                            (i / 37) as u32 & max as u32
                        } else {
                            ((seed >> 20) % (max + 1)) as u32
                        }
                    })
                    .collect();
                let mut out = Vec::new();
                rle_hybrid(&values, width, &mut out, |v| v);
                assert_eq!(decode(&out, width, n), values, "width {width} n {n}");
            }
        }
    }
}

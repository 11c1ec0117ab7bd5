//! Line numbers from a code object's line table, the way CPython computes them
//! (`PyCode_Addr2Line`): 3.10's `co_linetable` pairs, and PEP 657's location table from
//! 3.11 (`Objects/locations.md`). Both are walked from the start over an iterator of bytes,
//! so a table in another address space is read in small pieces; a damaged table gives a
//! wrong line or none, never a fault or an endless loop (each step consumes a byte).

/// The line of the instruction at byte `offset` of a 3.10 code object: pairs of (bytes
/// covered: u8, line delta: i8), the delta -128 meaning "no line" for that range. A range
/// of zero bytes only moves the line (how long deltas are spelled).
pub fn line_3_10(mut table: impl Iterator<Item = u8>, firstlineno: i32, offset: u32) -> Option<u32> {
    let (mut line, mut end) = (firstlineno, 0u64);
    loop {
        let (covered, delta) = (table.next()?, table.next()? as i8);
        let start = end;
        end += u64::from(covered);
        let here = if delta == -128 {
            None
        } else {
            line = line.wrapping_add(i32::from(delta));
            Some(line)
        };
        if (start..end).contains(&u64::from(offset)) {
            return here.and_then(positive);
        }
    }
}

/// Entry codes of the location table (bits 3–6 of an entry's first byte).
const NO_LOCATION: u8 = 15;
const LONG: u8 = 14;
const NO_COLUMNS: u8 = 13;
const ONE_LINE_FIRST: u8 = 10;

/// The line of the instruction at byte `offset` of a 3.11+ code object. Each entry starts
/// with a byte that has bit 7 set: its code (bits 3–6) says how the line moves, bits 0–2 the
/// code units it covers less one; the bytes after it (bit 7 clear) hold varints and columns.
pub fn line_pep657(table: impl Iterator<Item = u8>, firstlineno: i32, offset: u32) -> Option<u32> {
    let unit = u64::from(offset / 2);
    let mut table = table.peekable();
    let (mut line, mut start) = (firstlineno, 0u64);
    loop {
        let first = table.next()?;
        if first & 0x80 == 0 {
            // Out of step: not the start of an entry.
            return None;
        }
        let code = (first >> 3) & 15;
        let delta = match code {
            NO_LOCATION => None,
            LONG | NO_COLUMNS => Some(signed_varint(&mut table)?),
            ONE_LINE_FIRST..=12 => Some(i32::from(code - ONE_LINE_FIRST)),
            _ => Some(0),
        };
        // The rest of the entry (end line, columns) is not needed: skip to the next entry.
        while table.next_if(|&b| b & 0x80 == 0).is_some() {}
        if let Some(delta) = delta {
            line = line.wrapping_add(delta);
        }
        let end = start + u64::from(first & 7) + 1;
        if (start..end).contains(&unit) {
            return delta.and(positive(line));
        }
        start = end;
    }
}

/// 6 bits a byte, least significant first, bit 6 set on all but the last.
fn varint(table: &mut impl Iterator<Item = u8>) -> Option<u32> {
    let mut byte = table.next()?;
    let mut value = u32::from(byte & 63);
    let mut shift = 0;
    while byte & 64 != 0 {
        byte = table.next()?;
        shift += 6;
        if shift > 30 {
            return None;
        }
        value |= u32::from(byte & 63) << shift;
    }
    Some(value)
}

/// A varint whose lowest bit is the sign.
fn signed_varint(table: &mut impl Iterator<Item = u8>) -> Option<i32> {
    let value = varint(table)?;
    let magnitude = (value >> 1) as i32;
    Some(if value & 1 != 0 { -magnitude } else { magnitude })
}

fn positive(line: i32) -> Option<u32> {
    u32::try_from(line).ok().filter(|&line| line > 0)
}

#[cfg(test)]
pub(crate) mod encode {
    //! Line tables written the way CPython's compiler writes them, for the tests.

    /// 3.10: (bytes, line) ranges; `None` for a range without a line.
    pub fn table_3_10(firstlineno: i32, ranges: &[(u32, Option<i32>)]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut line = firstlineno;
        for &(mut bytes, target) in ranges {
            let mut delta = match target {
                Some(target) => target - line,
                None => -128,
            };
            if let Some(target) = target {
                line = target;
                // Deltas beyond an i8 go out in zero-byte steps first (as `assemble_lnotab` does).
                while !(-127..=127).contains(&delta) {
                    let step = delta.clamp(-127, 127);
                    out.extend([0u8, step as i8 as u8]);
                    delta -= step;
                }
            }
            // Ranges over 254 bytes go out in pieces; the later pieces move the line by 0.
            while bytes > 254 {
                out.extend([254u8, delta as i8 as u8]);
                bytes -= 254;
                delta = if target.is_some() { 0 } else { -128 };
            }
            out.extend([bytes as u8, delta as i8 as u8]);
        }
        out
    }

    fn varint(out: &mut Vec<u8>, mut value: u32) {
        while value >= 64 {
            out.push(0x40 | (value & 63) as u8);
            value >>= 6;
        }
        out.push(value as u8);
    }

    fn signed_varint(out: &mut Vec<u8>, value: i32) {
        varint(out, if value < 0 { ((-value as u32) << 1) | 1 } else { (value as u32) << 1 });
    }

    /// 3.11+: (code units, line) ranges, in the form the compiler would pick for each.
    pub fn table_pep657(firstlineno: i32, ranges: &[(u32, Option<i32>)]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut line = firstlineno;
        for &(mut units, target) in ranges {
            while units > 0 {
                let here = units.min(8);
                units -= here;
                let head = |code: u8| 0x80 | (code << 3) | (here - 1) as u8;
                match target {
                    None => out.push(head(15)),
                    Some(target) => {
                        let delta = target - line;
                        line = target;
                        match delta {
                            // Short form: same line, one column byte.
                            0 if here % 2 == 0 => out.extend([head(3), 0x25]),
                            // One-line form: delta 0–2, start and end column.
                            0..=2 => out.extend([head(10 + delta as u8), 4, 20]),
                            // No columns (odd lengths) or long form (even), both a signed delta.
                            _ if here % 2 == 1 => {
                                out.push(head(13));
                                signed_varint(&mut out, delta);
                            }
                            _ => {
                                out.push(head(14));
                                signed_varint(&mut out, delta);
                                varint(&mut out, 1);
                                varint(&mut out, 5);
                                varint(&mut out, 100);
                            }
                        }
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::encode::{table_3_10, table_pep657};
    use super::*;

    /// Ranges (length, line) with long deltas both ways, "no line" ranges and long ranges.
    fn ranges() -> Vec<(u32, Option<i32>)> {
        vec![
            (6, Some(10)),
            (4, Some(11)),
            (2, None),
            (300, Some(12)),
            (2, Some(900)),
            (4, Some(3)),
            (2, None),
            (8, Some(70_000)),
            (3, Some(70_000)),
            (5, Some(20)),
            (6, Some(14)),
        ]
    }

    /// The expected line at every offset (in `unit` bytes), from the ranges themselves.
    fn expected(ranges: &[(u32, Option<i32>)], unit: u32) -> Vec<(u32, Option<u32>)> {
        let mut at = 0;
        let mut out = Vec::new();
        for &(len, line) in ranges {
            for _ in 0..len {
                out.push((at * unit, line.map(|l| l as u32)));
                at += 1;
            }
        }
        out
    }

    #[test]
    fn lines_3_10_at_every_offset() {
        let table = table_3_10(10, &ranges());
        assert!(table.windows(2).any(|w| w == [0, 127]), "a long delta in steps");
        assert!(table.contains(&0x80), "a no-line entry");
        for (offset, line) in expected(&ranges(), 1) {
            assert_eq!(line_3_10(table.iter().copied(), 10, offset), line, "offset {offset}");
        }
        assert_eq!(line_3_10(table.iter().copied(), 10, 10_000), None, "past the end");
    }

    #[test]
    fn lines_pep657_at_every_offset() {
        let table = table_pep657(8, &ranges());
        for code in [3, 10, 11, 12, 13, 14, 15] {
            assert!(table.iter().any(|&b| b & 0x80 != 0 && (b >> 3) & 15 == code), "form {code} used");
        }
        for (offset, line) in expected(&ranges(), 2) {
            assert_eq!(line_pep657(table.iter().copied(), 8, offset), line, "offset {offset}");
            // The second byte of a code unit is the same instruction.
            assert_eq!(line_pep657(table.iter().copied(), 8, offset + 1), line, "offset {}", offset + 1);
        }
    }

    #[test]
    fn damaged_tables_end_without_a_fault() {
        let tables: [&[u8]; 5] =
            [&[], &[0x7f, 0x7f], &[0xf0, 0x7f], &[0xe8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], &[1]];
        for table in tables {
            for offset in [0, 2, 100] {
                let _ = line_pep657(table.iter().copied(), 1, offset);
                let _ = line_3_10(table.iter().copied(), 1, offset);
            }
        }
        assert_eq!(line_pep657([0x7fu8].into_iter(), 1, 0), None);
        // A line that would fall to zero or below is no line.
        assert_eq!(line_3_10([2u8, (-5i8) as u8].into_iter(), 1, 0), None);
    }
}

//! Column chunks written here rather than by the Parquet crate's column writer.
//! String rows hold indexes into the export's symbols already, so a chunk's dictionary is made
//! by looking each index up in an array (no hashing of the string per row, no
//! reference-counted copy per row, min/max over the dictionary rather than over every row).
//! Integer columns of few values (pids, tids, fds, errnos; byte counts and return values) are
//! hashed only when the value changes. Such a chunk is standard Parquet: a PLAIN dictionary
//! page, then v1 data pages of RLE_DICTIONARY indexes (definition levels first for an
//! optional column), each page zstd-compressed. Times and durations are DELTA_BINARY_PACKED
//! pages, not compressed. Each chunk goes to the file writer with `append_column`.
//!
//! The encoder is here; the pages and their metadata are in `pages.rs`, the bit-level
//! encodings (RLE/bit-packing hybrid, DELTA_BINARY_PACKED) in `bits.rs`.

mod bits;
mod pages;

use bytes::Bytes;
use parquet::basic::{Compression, Encoding};
use parquet::column::writer::ColumnCloseResult;
use parquet::data_type::ByteArray;
use parquet::errors::ParquetError;
use parquet::file::statistics::Statistics;
use parquet::schema::types::ColumnDescPtr;
use rustc_hash::FxHashMap;

use crate::prefetch::prefetch;
use bits::{bit_width, delta_binary_packed, rle_hybrid};
use pages::{Pages, compress, data_pages};

/// Distinct values above which an int32 chunk is left to the column writer (PLAIN).
const INT_DICTIONARY_MAX: usize = 1 << 16;
/// Longer minimum or maximum strings are left out of the chunk's statistics, as the column
/// writer truncates them (a plan filtering on such a column reads the chunk).
const STATISTICS_MAX_LEN: usize = 64;

fn err(e: impl std::fmt::Display) -> ParquetError {
    ParquetError::General(e.to_string())
}

/// What a string column chunk's encoder keeps between chunks: the symbols it has been sent
/// and, per symbol, its index in the chunk being written + 1 (0: not in it).
#[derive(Default)]
pub(crate) struct DictionaryEncoder {
    symbols: Vec<Bytes>,
    local: Vec<u32>,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    level: i32,
    /// Reused buffers.
    keys: Vec<u32>,
    uses: Vec<i64>,
    body: Vec<u8>,
    dict_body: Vec<u8>,
    by_value: FxHashMap<i64, u32>,
}

impl DictionaryEncoder {
    pub(crate) fn new(level: i32) -> DictionaryEncoder {
        DictionaryEncoder { level, ..Default::default() }
    }

    /// Symbols added since the last call (their indexes follow the ones known).
    pub(crate) fn extend(&mut self, symbols: impl IntoIterator<Item = Bytes>) {
        self.symbols.extend(symbols);
        self.local.resize(self.symbols.len(), 0);
    }

    /// Takes the symbols of `all` (the export's so far, of which it knows a prefix) that it
    /// does not know yet.
    pub(crate) fn catch_up(&mut self, all: &[Bytes]) {
        let known = self.symbols.len();
        self.extend(all[known..].iter().cloned());
    }

    /// Encodes one string column chunk: `values` are symbol indexes of the rows with a
    /// value, `def` the definition levels of an optional column (one per row). Returns the
    /// chunk's bytes (offsets in its metadata are relative to them) and what `append_column`
    /// needs.
    pub(crate) fn chunk(
        &mut self,
        descr: ColumnDescPtr,
        values: &[u32],
        def: Option<&[i16]>,
    ) -> Result<(Bytes, ColumnCloseResult), ParquetError> {
        // The chunk's dictionary, in order of first use.
        let mut dict: Vec<u32> = Vec::new();
        // Rows per dictionary entry, for the chunk's unencoded size (summing each row's
        // string length read a symbol per row: cache misses over every path of the run).
        let mut uses = std::mem::take(&mut self.uses);
        uses.clear();
        let mut keys = std::mem::take(&mut self.keys);
        keys.clear();
        keys.reserve(values.len());
        for (at, &symbol) in values.iter().enumerate() {
            // Over a run's paths the slots are scattered too (4 bytes a symbol).
            if let Some(&ahead) = values.get(at + 16) {
                prefetch(self.local.as_ptr().wrapping_add(ahead as usize));
            }
            let slot = self.local.get_mut(symbol as usize).ok_or_else(|| err("unknown string index"))?;
            if *slot == 0 {
                dict.push(symbol);
                uses.push(0);
                *slot = dict.len() as u32;
            }
            let key = *slot - 1;
            uses[key as usize] += 1;
            keys.push(key);
        }
        for &symbol in &dict {
            self.local[symbol as usize] = 0;
        }
        let mut body = std::mem::take(&mut self.dict_body);
        body.clear();
        let mut min_max: Option<(&[u8], &[u8])> = None;
        for (at, &symbol) in dict.iter().enumerate() {
            // A chunk's paths are scattered over the run's symbols, each a cache miss for its
            // handle and one for its bytes (copying them was 5 % of a 64-rank export): both
            // are asked for ahead, the handle further.
            if let Some(&ahead) = dict.get(at + 16) {
                prefetch(&self.symbols[ahead as usize]);
            }
            if let Some(&ahead) = dict.get(at + 8) {
                prefetch(self.symbols[ahead as usize].as_ptr());
            }
            let s: &[u8] = &self.symbols[symbol as usize];
            body.extend_from_slice(&(s.len() as u32).to_le_bytes());
            body.extend_from_slice(s);
            min_max = Some(match min_max {
                None => (s, s),
                Some((lo, hi)) => (lo.min(s), hi.max(s)),
            });
        }
        let unencoded =
            dict.iter().zip(&uses).map(|(&symbol, &n)| self.symbols[symbol as usize].len() as i64 * n).sum();
        self.uses = uses;
        let rows = def.map_or(values.len(), <[i16]>::len);
        let min_max = min_max.filter(|(lo, hi)| lo.len().max(hi.len()) <= STATISTICS_MAX_LEN);
        let statistics = Statistics::byte_array(
            min_max.map(|(lo, _)| ByteArray::from(lo.to_vec())),
            min_max.map(|(_, hi)| ByteArray::from(hi.to_vec())),
            None,
            Some((rows - values.len()) as u64),
            false,
        );
        let written = self.pages(descr, def, dict.len(), &body, &keys, statistics, Some(unencoded));
        self.keys = keys;
        self.dict_body = body;
        written
    }

    /// Encodes one integer column chunk (int32 or int64) as [`DictionaryEncoder::chunk`]
    /// does, its dictionary made by hashing (the last value remembered: runs of a thread's
    /// pid, tid, fd, of a call's byte count). `None` when the chunk has too many distinct
    /// values for a dictionary to pay: the column writer takes it.
    pub(crate) fn int_chunk<T: IntValue>(
        &mut self,
        descr: ColumnDescPtr,
        values: &[T],
        def: Option<&[i16]>,
    ) -> Result<Option<(Bytes, ColumnCloseResult)>, ParquetError> {
        let mut keys = std::mem::take(&mut self.keys);
        keys.clear();
        keys.reserve(values.len());
        let mut by_value = std::mem::take(&mut self.by_value);
        by_value.clear();
        let mut body = std::mem::take(&mut self.dict_body);
        body.clear();
        let mut last: Option<(T, u32)> = None;
        let mut min_max: Option<(T, T)> = None;
        for &value in values {
            let key = match last {
                Some((v, key)) if v == value => key,
                _ => {
                    let next = by_value.len() as u32;
                    let key = *by_value.entry(value.into()).or_insert(next);
                    if key == next {
                        value.put(&mut body);
                        min_max =
                            Some(min_max.map_or((value, value), |(lo, hi)| (lo.min(value), hi.max(value))));
                    }
                    last = Some((value, key));
                    key
                }
            };
            keys.push(key);
        }
        let distinct = by_value.len();
        self.by_value = by_value;
        let written = if distinct > INT_DICTIONARY_MAX {
            None
        } else {
            let rows = def.map_or(values.len(), <[i16]>::len);
            let statistics = T::statistics(min_max, (rows - values.len()) as u64);
            Some(self.pages(descr, def, distinct, &body, &keys, statistics, None)?)
        };
        self.keys = keys;
        self.dict_body = body;
        Ok(written)
    }

    /// Writes a chunk's pages: the dictionary page (`dict_len` values PLAIN in `dict_body`),
    /// then data pages of `keys` (one per value) with the definition levels `def`.
    #[allow(clippy::too_many_arguments)]
    fn pages(
        &mut self,
        descr: ColumnDescPtr,
        def: Option<&[i16]>,
        dict_len: usize,
        dict_body: &[u8],
        keys: &[u32],
        statistics: Statistics,
        unencoded: Option<i64>,
    ) -> Result<(Bytes, ColumnCloseResult), ParquetError> {
        let rows = def.map_or(keys.len(), <[i16]>::len);
        let mut chunk = Pages::default();
        if dict_len > 0 {
            let buf = compress(&mut self.zstd, self.level, dict_body)?;
            chunk.dictionary(buf, dict_body.len(), dict_len)?;
        }

        // A chunk with no value (all null) has no dictionary: its pages say PLAIN, and hold
        // definition levels only.
        let encoding = if dict_len == 0 { Encoding::PLAIN } else { Encoding::RLE_DICTIONARY };
        let width = bit_width(dict_len.saturating_sub(1) as u32).max(1);
        let mut body = std::mem::take(&mut self.body);
        let zstd = &mut self.zstd;
        data_pages(def, rows, &mut body, |body, present, page_rows| {
            if dict_len > 0 {
                body.push(width);
                rle_hybrid(&keys[present], width, body, |k| k);
            }
            let buf = compress(zstd, self.level, body)?;
            chunk.data(buf, body.len(), page_rows, encoding)
        })?;
        self.body = body;
        let compression = Compression::ZSTD(parquet::basic::ZstdLevel::try_new(self.level).map_err(err)?);
        chunk.finish(descr, compression, rows, statistics, unencoded)
    }

    /// Encodes one int64 column chunk as DELTA_BINARY_PACKED pages, not compressed: for times
    /// (small steps) and durations, where bit-packed deltas come within a few tenths of a
    /// byte a value of what zstd makes of PLAIN values, for a small part of its work.
    pub(crate) fn delta_chunk(
        &mut self,
        descr: ColumnDescPtr,
        values: &[i64],
        def: Option<&[i16]>,
    ) -> Result<(Bytes, ColumnCloseResult), ParquetError> {
        let rows = def.map_or(values.len(), <[i16]>::len);
        let mut chunk = Pages::default();
        let mut body = std::mem::take(&mut self.body);
        let mut min_max: Option<(i64, i64)> = None;
        data_pages(def, rows, &mut body, |body, present, page_rows| {
            if let Some(range) = delta_binary_packed(&values[present], body) {
                min_max = Some(min_max.map_or(range, |(lo, hi)| (lo.min(range.0), hi.max(range.1))));
            }
            chunk.data(Bytes::copy_from_slice(body), body.len(), page_rows, Encoding::DELTA_BINARY_PACKED)
        })?;
        self.body = body;
        let statistics = i64::statistics(min_max, (rows - values.len()) as u64);
        chunk.finish(descr, Compression::UNCOMPRESSED, rows, statistics, None)
    }
}

/// Column values the dictionary encoder takes: int32 and int64.
pub(crate) trait IntValue: Copy + PartialEq + Ord + Into<i64> {
    /// Appends the PLAIN encoding of the value.
    fn put(self, out: &mut Vec<u8>);
    /// A chunk's statistics: its (min, max), if it has a value, and its null count.
    fn statistics(min_max: Option<(Self, Self)>, nulls: u64) -> Statistics;
}

impl IntValue for i32 {
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn statistics(min_max: Option<(i32, i32)>, nulls: u64) -> Statistics {
        Statistics::int32(min_max.map(|m| m.0), min_max.map(|m| m.1), None, Some(nulls), false)
    }
}

impl IntValue for i64 {
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn statistics(min_max: Option<(i64, i64)>, nulls: u64) -> Statistics {
        Statistics::int64(min_max.map(|m| m.0), min_max.map(|m| m.1), None, Some(nulls), false)
    }
}

#[cfg(test)]
mod tests;

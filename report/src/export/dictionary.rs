//! Column chunks written here rather than by the Parquet crate's column writer.
//! String rows hold indexes into the export's symbols already, so a chunk's dictionary is made
//! by looking each index up in an array (no hashing of the string per row, no
//! reference-counted copy per row, min/max over the dictionary rather than over every row).
//! Integer columns of few values (pids, tids, fds, errnos; byte counts and return values) are
//! hashed only when the value changes. Such a chunk is standard Parquet: a PLAIN dictionary
//! page, then v1 data pages of RLE_DICTIONARY indexes (definition levels first for an
//! optional column), each page zstd-compressed. Times and durations are DELTA_BINARY_PACKED
//! pages, not compressed. Each chunk goes to the file writer with `append_column`.

use bytes::Bytes;
use parquet::basic::{Compression, Encoding, EncodingMask, PageType};
use parquet::column::page::{CompressedPage, Page, PageWriter};
use parquet::column::writer::ColumnCloseResult;
use parquet::data_type::ByteArray;
use parquet::errors::ParquetError;
use parquet::file::metadata::{ColumnChunkMetaData, PageEncodingStats};
use parquet::file::statistics::Statistics;
use parquet::file::writer::{SerializedPageWriter, TrackedWrite};
use parquet::schema::types::ColumnDescPtr;
use rustc_hash::FxHashMap;

use crate::prefetch::prefetch;

/// Values per data page.
const PAGE_VALUES: usize = 32 << 10;
/// Distinct values above which an int32 chunk is left to the column writer (PLAIN).
const INT_DICTIONARY_MAX: usize = 1 << 16;
/// Longer minimum or maximum strings are left out of the chunk's statistics, as the column
/// writer truncates them (a plan filtering on such a column reads the chunk).
const STATISTICS_MAX_LEN: usize = 64;

fn err(e: impl std::fmt::Display) -> ParquetError {
    ParquetError::General(e.to_string())
}

/// A page's body, compressed (the compressor made on first use).
fn compress(
    zstd: &mut Option<zstd::bulk::Compressor<'static>>,
    level: i32,
    body: &[u8],
) -> Result<Bytes, ParquetError> {
    let zstd = match zstd {
        Some(zstd) => zstd,
        None => zstd.insert(zstd::bulk::Compressor::new(level).map_err(err)?),
    };
    let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(body.len()));
    zstd.compress_to_buffer(body, &mut out).map_err(err)?;
    Ok(Bytes::from(out))
}

/// What a string column chunk's encoder keeps between chunks: the symbols it has been sent
/// and, per symbol, its index in the chunk being written + 1 (0: not in it).
#[derive(Default)]
pub struct DictionaryEncoder {
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
    pub fn new(level: i32) -> DictionaryEncoder {
        DictionaryEncoder { level, ..Default::default() }
    }

    /// Symbols added since the last call (their indexes follow the ones known).
    pub fn extend(&mut self, symbols: impl IntoIterator<Item = Bytes>) {
        self.symbols.extend(symbols);
        self.local.resize(self.symbols.len(), 0);
    }

    /// Takes the symbols of `all` (the export's so far, of which it knows a prefix) that it
    /// does not know yet.
    pub fn catch_up(&mut self, all: &[Bytes]) {
        let known = self.symbols.len();
        self.extend(all[known..].iter().cloned());
    }

    /// Encodes one string column chunk: `values` are symbol indexes of the rows with a
    /// value, `def` the definition levels of an optional column (one per row). Returns the
    /// chunk's bytes (offsets in its metadata are relative to them) and what `append_column`
    /// needs.
    pub fn chunk(
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
    pub fn int_chunk<T: IntValue>(
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
    pub fn delta_chunk(
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
pub trait IntValue: Copy + PartialEq + Ord + Into<i64> {
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

/// A column chunk's pages as they are written (header and body each), and what its metadata
/// says of them.
struct Pages {
    sink: TrackedWrite<Vec<u8>>,
    compressed: u64,
    uncompressed: u64,
    encodings: EncodingMask,
    page_stats: Vec<PageEncodingStats>,
    dictionary_offset: Option<i64>,
    data_offset: Option<i64>,
    data_pages: i32,
    data_encoding: Option<Encoding>,
}

impl Default for Pages {
    fn default() -> Pages {
        Pages {
            sink: TrackedWrite::new(Vec::new()),
            compressed: 0,
            uncompressed: 0,
            encodings: EncodingMask::default(),
            page_stats: Vec::new(),
            dictionary_offset: None,
            data_offset: None,
            data_pages: 0,
            data_encoding: None,
        }
    }
}

impl Pages {
    fn write(&mut self, page: Page, uncompressed: usize) -> Result<i64, ParquetError> {
        let spec =
            SerializedPageWriter::new(&mut self.sink).write_page(CompressedPage::new(page, uncompressed))?;
        self.compressed += spec.compressed_size as u64;
        self.uncompressed += spec.uncompressed_size as u64;
        Ok(spec.offset as i64)
    }

    /// The dictionary page: `len` values PLAIN, `buf` their (maybe compressed) bytes.
    fn dictionary(&mut self, buf: Bytes, uncompressed: usize, len: usize) -> Result<(), ParquetError> {
        let page =
            Page::DictionaryPage { buf, num_values: len as u32, encoding: Encoding::PLAIN, is_sorted: false };
        self.dictionary_offset = Some(self.write(page, uncompressed)?);
        self.encodings.insert(Encoding::PLAIN);
        self.page_stats.push(PageEncodingStats {
            page_type: PageType::DICTIONARY_PAGE,
            encoding: Encoding::PLAIN,
            count: 1,
        });
        Ok(())
    }

    /// A v1 data page of `rows` rows (nulls included); every data page of a chunk has the
    /// same `encoding`.
    fn data(
        &mut self,
        buf: Bytes,
        uncompressed: usize,
        rows: usize,
        encoding: Encoding,
    ) -> Result<(), ParquetError> {
        let page = Page::DataPage {
            buf,
            num_values: rows as u32,
            encoding,
            def_level_encoding: Encoding::RLE,
            rep_level_encoding: Encoding::RLE,
            statistics: None,
        };
        let offset = self.write(page, uncompressed)?;
        self.data_offset.get_or_insert(offset);
        self.data_pages += 1;
        self.data_encoding = Some(encoding);
        Ok(())
    }

    /// The chunk's bytes (offsets in its metadata are relative to them) and what
    /// `append_column` needs.
    fn finish(
        mut self,
        descr: ColumnDescPtr,
        compression: Compression,
        rows: usize,
        statistics: Statistics,
        unencoded: Option<i64>,
    ) -> Result<(Bytes, ColumnCloseResult), ParquetError> {
        if let Some(encoding) = self.data_encoding {
            self.encodings.insert(encoding);
            self.page_stats.push(PageEncodingStats {
                page_type: PageType::DATA_PAGE,
                encoding,
                count: self.data_pages,
            });
        }
        self.encodings.insert(Encoding::RLE);
        let metadata = ColumnChunkMetaData::builder(descr)
            .set_compression(compression)
            .set_encodings_mask(self.encodings)
            .set_page_encoding_stats(self.page_stats)
            .set_total_compressed_size(self.compressed as i64)
            .set_total_uncompressed_size(self.uncompressed as i64)
            .set_num_values(rows as i64)
            .set_data_page_offset(self.data_offset.unwrap_or(0))
            .set_dictionary_page_offset(self.dictionary_offset)
            .set_statistics(statistics)
            .set_unencoded_byte_array_data_bytes(unencoded)
            .build()?;
        let bytes = Bytes::from(self.sink.into_inner()?);
        let close = ColumnCloseResult {
            bytes_written: bytes.len() as u64,
            rows_written: rows as u64,
            metadata,
            bloom_filter: None,
            column_index: None,
            offset_index: None,
        };
        Ok((bytes, close))
    }
}

/// Cuts a chunk of `rows` rows into data pages of [`PAGE_VALUES`] rows (at least one page,
/// even for a chunk of no row): for each, `body` holds the page's definition levels (`def`,
/// an optional column's) and `page` appends its values, given which of the chunk's values
/// (those present) and how many rows the page has, then writes it.
fn data_pages(
    def: Option<&[i16]>,
    rows: usize,
    body: &mut Vec<u8>,
    mut page: impl FnMut(&mut Vec<u8>, std::ops::Range<usize>, usize) -> Result<(), ParquetError>,
) -> Result<(), ParquetError> {
    let (mut row, mut value) = (0, 0);
    loop {
        let end = (row + PAGE_VALUES).min(rows);
        body.clear();
        let present = levels(def, row, end, body);
        page(body, value..value + present, end - row)?;
        (row, value) = (end, value + present);
        if row >= rows {
            return Ok(());
        }
    }
}

/// Appends the definition levels of rows `row..end` of an optional column (`def`) to a
/// page's body, RLE with their length first; returns how many of the rows have a value.
fn levels(def: Option<&[i16]>, row: usize, end: usize, body: &mut Vec<u8>) -> usize {
    match def {
        Some(def) => {
            let levels = &def[row..end];
            let at = body.len();
            body.extend_from_slice(&[0; 4]);
            rle_hybrid(levels, 1, body, |d| d as u32);
            let len = (body.len() - at - 4) as u32;
            body[at..at + 4].copy_from_slice(&len.to_le_bytes());
            levels.iter().filter(|&&d| d != 0).count()
        }
        None => end - row,
    }
}

/// Values per DELTA_BINARY_PACKED block, and miniblocks per block.
const DELTA_BLOCK: usize = 128;
const DELTA_MINIBLOCKS: usize = 4;

/// Appends `values` DELTA_BINARY_PACKED (Parquet's format: a header, then blocks of 128
/// deltas as a minimum delta and 4 bit-packed miniblocks of 32, each its own width); returns
/// their minimum and maximum, if any.
fn delta_binary_packed(values: &[i64], out: &mut Vec<u8>) -> Option<(i64, i64)> {
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
fn bit_width(max: u32) -> u8 {
    (32 - max.leading_zeros()) as u8
}

/// Parquet's RLE / bit-packing hybrid encoding of `values` as `width`-bit integers (no
/// length prefix): a run of 8 or more equal values starting at a group of 8 is one RLE run,
/// the rest is bit-packed in groups of 8 (the last group padded with zeros).
fn rle_hybrid<T: Copy + PartialEq>(values: &[T], width: u8, out: &mut Vec<u8>, as_u32: impl Fn(T) -> u32) {
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
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::file::writer::SerializedFileWriter;
    use parquet::record::Field;

    /// A Parquet file written to memory with the default properties, of the schema `message`.
    fn file_in_memory(message: &str) -> SerializedFileWriter<Vec<u8>> {
        use parquet::file::properties::WriterProperties;
        use std::sync::Arc;
        let schema = parquet::schema::parser::parse_message_type(message).unwrap();
        SerializedFileWriter::new(Vec::new(), Arc::new(schema), Arc::new(WriterProperties::builder().build()))
            .unwrap()
    }

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

    /// Writes row groups of a required and an optional string column with `DictionaryEncoder`
    /// and reads them back with the Parquet crate's reader.
    #[test]
    fn string_chunks_read_back() {
        let mut file =
            file_in_memory("message t { required binary name (STRING); optional binary path (STRING); }");
        let symbols: Vec<Bytes> =
            (0..3000).map(|i| Bytes::from(format!("/data/file-{i:05}{}", "x".repeat(i % 90)))).collect();
        let mut encoder = DictionaryEncoder::new(1);
        encoder.extend(symbols.iter().cloned());
        let mut expected = Vec::new();
        // Many pages with runs and nulls; one row; all null; one distinct value.
        type Paths = fn(usize) -> Option<u32>;
        let groups: [(usize, Paths); 4] = [
            (100_000, |i| (i % 7 != 3).then_some(((i / 5) % 3000) as u32)),
            (1, |_| Some(2999)),
            (20, |_| None),
            (70_000, |_| Some(42)),
        ];
        for (rows, path) in groups {
            let names: Vec<u32> = (0..rows).map(|i| (i % 11) as u32).collect();
            let paths: Vec<Option<u32>> = (0..rows).map(path).collect();
            let def: Vec<i16> = paths.iter().map(|p| p.is_some() as i16).collect();
            let values: Vec<u32> = paths.iter().flatten().copied().collect();
            let descr = file.schema_descr().clone();
            let mut group = file.next_row_group().unwrap();
            let (bytes, close) = encoder.chunk(descr.column(0), &names, None).unwrap();
            group.append_column(&bytes, close).unwrap();
            let (bytes, close) = encoder.chunk(descr.column(1), &values, Some(&def)).unwrap();
            group.append_column(&bytes, close).unwrap();
            group.close().unwrap();
            expected.extend(names.iter().zip(&paths).map(|(&n, &p)| (n, p)));
        }
        let bytes = Bytes::from(file.into_inner().unwrap());
        let reader = SerializedFileReader::new(bytes).unwrap();
        let text = |i: u32| String::from_utf8(symbols[i as usize].to_vec()).unwrap();
        let mut rows = 0;
        for (row, &(name, path)) in reader.get_row_iter(None).unwrap().zip(&expected) {
            let row = row.unwrap();
            let fields: Vec<&Field> = row.get_column_iter().map(|(_, f)| f).collect();
            assert_eq!(fields[0], &Field::Str(text(name)), "row {rows}");
            assert_eq!(fields[1], &path.map_or(Field::Null, |p| Field::Str(text(p))), "row {rows}");
            rows += 1;
        }
        assert_eq!(rows, expected.len());
        let metadata = reader.metadata();
        let stats = metadata.row_group(2).column(1).statistics().unwrap();
        assert_eq!(stats.null_count_opt(), Some(20));
        let stats = metadata.row_group(3).column(1).statistics().unwrap();
        assert_eq!(stats.min_bytes_opt(), Some(&symbols[42][..]));
    }

    /// Int32 chunks with nulls, runs and a negative value read back; a chunk of too many
    /// distinct values is declined.
    #[test]
    fn int32_chunks_read_back() {
        let mut file = file_in_memory("message t { optional int32 v; }");
        let mut encoder = DictionaryEncoder::new(1);
        let expected: Vec<Option<i32>> =
            (0..50_000).map(|i| (i % 5 != 0).then_some((i / 100) % 40 - 3)).collect();
        let def: Vec<i16> = expected.iter().map(|v| v.is_some() as i16).collect();
        let values: Vec<i32> = expected.iter().flatten().copied().collect();
        let descr = file.schema_descr().clone();
        let mut group = file.next_row_group().unwrap();
        let (bytes, close) = encoder.int_chunk(descr.column(0), &values, Some(&def)).unwrap().unwrap();
        group.append_column(&bytes, close).unwrap();
        group.close().unwrap();
        let many: Vec<i32> = (0..(INT_DICTIONARY_MAX as i32 + 1)).collect();
        assert!(encoder.int_chunk(descr.column(0), &many, None).unwrap().is_none());

        let reader = SerializedFileReader::new(Bytes::from(file.into_inner().unwrap())).unwrap();
        let read: Vec<Option<i32>> = reader
            .get_row_iter(None)
            .unwrap()
            .map(|row| match row.unwrap().get_column_iter().next().unwrap().1 {
                Field::Int(v) => Some(*v),
                Field::Null => None,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(read, expected);
        let stats = reader.metadata().row_group(0).column(0).statistics().unwrap();
        assert_eq!(
            (stats.min_bytes_opt(), stats.max_bytes_opt()),
            (Some(&(-3i32).to_le_bytes()[..]), Some(&36i32.to_le_bytes()[..]))
        );
    }

    /// Int64 chunks of required and optional columns, DELTA_BINARY_PACKED (times, wide
    /// jumps, extremes, partial blocks, pages of one value and of none) and dictionary-encoded,
    /// read back with the Parquet crate's reader, with their statistics.
    #[test]
    fn int64_chunks_read_back() {
        let mut file = file_in_memory("message t { required int64 a; optional int64 b; required int64 c; }");
        let mut encoder = DictionaryEncoder::new(1);
        let mut seed = 11u64;
        let mut expected = Vec::new();
        for rows in [100_000usize, 1, 0, 129, 40_000] {
            let a: Vec<i64> = (0..rows)
                .map(|i| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    match i % 1000 {
                        7 => i64::MIN,
                        8 => i64::MAX,
                        9 => 0,
                        _ if i % 3 == 0 => 1_000_000_000_000 + i as i64 * 1000,
                        _ => (seed >> 40) as i64 - (1 << 23),
                    }
                })
                .collect();
            let b: Vec<Option<i64>> =
                (0..rows).map(|i| (i % 5 != 1 && rows != 40_000).then_some(i as i64 * 7 - 50)).collect();
            let c: Vec<i64> = (0..rows).map(|i| [0, 65536, -1, 5, 1 << 47][(i / 3) % 5]).collect();
            let def: Vec<i16> = b.iter().map(|v| v.is_some() as i16).collect();
            let present: Vec<i64> = b.iter().flatten().copied().collect();
            let descr = file.schema_descr().clone();
            let mut group = file.next_row_group().unwrap();
            let (bytes, close) = encoder.delta_chunk(descr.column(0), &a, None).unwrap();
            if let (Some(lo), Some(hi)) = (a.iter().min(), a.iter().max()) {
                let stats = close.metadata.statistics().unwrap();
                assert_eq!(stats.min_bytes_opt(), Some(&lo.to_le_bytes()[..]));
                assert_eq!(stats.max_bytes_opt(), Some(&hi.to_le_bytes()[..]));
            }
            group.append_column(&bytes, close).unwrap();
            let (bytes, close) = encoder.delta_chunk(descr.column(1), &present, Some(&def)).unwrap();
            group.append_column(&bytes, close).unwrap();
            let (bytes, close) = encoder.int_chunk(descr.column(2), &c, None).unwrap().unwrap();
            group.append_column(&bytes, close).unwrap();
            group.close().unwrap();
            expected.extend((0..rows).map(|i| (a[i], b[i], c[i])));
        }
        let reader = SerializedFileReader::new(Bytes::from(file.into_inner().unwrap())).unwrap();
        let int = |f: &Field| match f {
            Field::Long(v) => Some(*v),
            Field::Null => None,
            other => panic!("{other:?}"),
        };
        let read: Vec<(i64, Option<i64>, i64)> = reader
            .get_row_iter(None)
            .unwrap()
            .map(|row| {
                let row = row.unwrap();
                let f: Vec<&Field> = row.get_column_iter().map(|(_, f)| f).collect();
                (int(f[0]).unwrap(), int(f[1]), int(f[2]).unwrap())
            })
            .collect();
        assert_eq!(read.len(), expected.len());
        assert!(read == expected);
        let many: Vec<i64> = (0..(INT_DICTIONARY_MAX as i64 + 1)).collect();
        let descr = file_descr();
        assert!(encoder.int_chunk(descr, &many, None).unwrap().is_none());
    }

    fn file_descr() -> ColumnDescPtr {
        let schema = parquet::schema::parser::parse_message_type("message t { required int64 v; }").unwrap();
        parquet::schema::types::SchemaDescriptor::new(std::sync::Arc::new(schema)).column(0)
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

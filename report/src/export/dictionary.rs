//! Dictionary-encoded columns, written here rather than by the Parquet crate's column writer.
//! String rows hold indexes into the export's symbols already, so a chunk's dictionary is made
//! by looking each index up in an array (no hashing of the string per row, no
//! reference-counted copy per row, min/max over the dictionary rather than over every row).
//! Int32 columns of few values (pids, tids, fds, errnos) are hashed only when the value
//! changes. The chunk is standard Parquet: a PLAIN dictionary page, then v1 data pages of
//! RLE_DICTIONARY indexes (definition levels first for an optional column), each page
//! zstd-compressed, handed to the file writer with `append_column`.

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
    body: Vec<u8>,
    dict_body: Vec<u8>,
    by_value: FxHashMap<i32, u32>,
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
        let mut keys = std::mem::take(&mut self.keys);
        keys.clear();
        keys.reserve(values.len());
        for &symbol in values {
            let slot = self.local.get_mut(symbol as usize).ok_or_else(|| err("unknown string index"))?;
            if *slot == 0 {
                dict.push(symbol);
                *slot = dict.len() as u32;
            }
            keys.push(*slot - 1);
        }
        for &symbol in &dict {
            self.local[symbol as usize] = 0;
        }
        let mut body = std::mem::take(&mut self.dict_body);
        body.clear();
        let mut min_max: Option<(&[u8], &[u8])> = None;
        for &symbol in &dict {
            let s: &[u8] = &self.symbols[symbol as usize];
            body.extend_from_slice(&(s.len() as u32).to_le_bytes());
            body.extend_from_slice(s);
            min_max = Some(match min_max {
                None => (s, s),
                Some((lo, hi)) => (lo.min(s), hi.max(s)),
            });
        }
        let unencoded = keys.iter().map(|&key| self.symbols[dict[key as usize] as usize].len() as i64).sum();
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

    /// Encodes one int32 column chunk as [`DictionaryEncoder::chunk`] does, its dictionary made by
    /// hashing (the last value remembered: runs of a thread's pid, tid, fd). `None` when the
    /// chunk has too many distinct values for a dictionary to pay: the column writer takes it.
    pub fn int32_chunk(
        &mut self,
        descr: ColumnDescPtr,
        values: &[i32],
        def: Option<&[i16]>,
    ) -> Result<Option<(Bytes, ColumnCloseResult)>, ParquetError> {
        let mut keys = std::mem::take(&mut self.keys);
        keys.clear();
        keys.reserve(values.len());
        let mut by_value = std::mem::take(&mut self.by_value);
        by_value.clear();
        let mut body = std::mem::take(&mut self.dict_body);
        body.clear();
        let mut last: Option<(i32, u32)> = None;
        let (mut min, mut max) = (i32::MAX, i32::MIN);
        for &value in values {
            let key = match last {
                Some((v, key)) if v == value => key,
                _ => {
                    let next = by_value.len() as u32;
                    let key = *by_value.entry(value).or_insert(next);
                    if key == next {
                        body.extend_from_slice(&value.to_le_bytes());
                        (min, max) = (min.min(value), max.max(value));
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
            let present = !values.is_empty();
            let statistics = Statistics::int32(
                present.then_some(min),
                present.then_some(max),
                None,
                Some((rows - values.len()) as u64),
                false,
            );
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
        let mut sink = TrackedWrite::new(Vec::new());
        let mut writer = SerializedPageWriter::new(&mut sink);
        let (mut compressed, mut uncompressed) = (0u64, 0u64);
        let mut encodings = EncodingMask::default();
        let mut page_stats = Vec::new();
        let mut dictionary_offset = None;
        if dict_len > 0 {
            let buf = compress(&mut self.zstd, self.level, dict_body)?;
            let page = Page::DictionaryPage {
                buf,
                num_values: dict_len as u32,
                encoding: Encoding::PLAIN,
                is_sorted: false,
            };
            let spec = writer.write_page(CompressedPage::new(page, dict_body.len()))?;
            dictionary_offset = Some(spec.offset as i64);
            compressed += spec.compressed_size as u64;
            uncompressed += spec.uncompressed_size as u64;
            encodings.insert(Encoding::PLAIN);
            page_stats.push(PageEncodingStats {
                page_type: PageType::DICTIONARY_PAGE,
                encoding: Encoding::PLAIN,
                count: 1,
            });
        }

        // A chunk with no value (all null) has no dictionary: its pages say PLAIN, and hold
        // definition levels only.
        let encoding = if dict_len == 0 { Encoding::PLAIN } else { Encoding::RLE_DICTIONARY };
        let width = bit_width(dict_len.saturating_sub(1) as u32).max(1);
        let mut body = std::mem::take(&mut self.body);
        let mut data_offset = None;
        let (mut row, mut key, mut pages) = (0, 0, 0);
        // At least one page, even for a chunk of no row.
        loop {
            let end = (row + PAGE_VALUES).min(rows);
            body.clear();
            let present = match def {
                Some(def) => {
                    let levels = &def[row..end];
                    let at = body.len();
                    body.extend_from_slice(&[0; 4]);
                    rle_hybrid(levels, 1, &mut body, |d| d as u32);
                    let len = (body.len() - at - 4) as u32;
                    body[at..at + 4].copy_from_slice(&len.to_le_bytes());
                    levels.iter().filter(|&&d| d != 0).count()
                }
                None => end - row,
            };
            if dict_len > 0 {
                body.push(width);
                rle_hybrid(&keys[key..key + present], width, &mut body, |k| k);
            }
            let buf = compress(&mut self.zstd, self.level, &body)?;
            let page = Page::DataPage {
                buf,
                num_values: (end - row) as u32,
                encoding,
                def_level_encoding: Encoding::RLE,
                rep_level_encoding: Encoding::RLE,
                statistics: None,
            };
            let spec = writer.write_page(CompressedPage::new(page, body.len()))?;
            data_offset.get_or_insert(spec.offset as i64);
            compressed += spec.compressed_size as u64;
            uncompressed += spec.uncompressed_size as u64;
            (row, key, pages) = (end, key + present, pages + 1);
            if row >= rows {
                break;
            }
        }
        self.body = body;
        encodings.insert(encoding);
        encodings.insert(Encoding::RLE);
        page_stats.push(PageEncodingStats { page_type: PageType::DATA_PAGE, encoding, count: pages });

        let metadata = ColumnChunkMetaData::builder(descr)
            .set_compression(Compression::ZSTD(parquet::basic::ZstdLevel::try_new(self.level).map_err(err)?))
            .set_encodings_mask(encodings)
            .set_page_encoding_stats(page_stats)
            .set_total_compressed_size(compressed as i64)
            .set_total_uncompressed_size(uncompressed as i64)
            .set_num_values(rows as i64)
            .set_data_page_offset(data_offset.unwrap_or(0))
            .set_dictionary_page_offset(dictionary_offset)
            .set_statistics(statistics)
            .set_unencoded_byte_array_data_bytes(unencoded)
            .build()?;
        let bytes = Bytes::from(sink.into_inner()?);
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

    /// Writes row groups of a required and an optional string column with `DictionaryEncoder`
    /// and reads them back with the Parquet crate's reader.
    #[test]
    fn string_chunks_read_back() {
        use parquet::file::properties::WriterProperties;
        use parquet::file::reader::{FileReader, SerializedFileReader};
        use parquet::file::writer::SerializedFileWriter;
        use parquet::record::Field;
        use std::sync::Arc;

        let schema = parquet::schema::parser::parse_message_type(
            "message t { required binary name (STRING); optional binary path (STRING); }",
        )
        .unwrap();
        let props = WriterProperties::builder().build();
        let mut file = SerializedFileWriter::new(Vec::new(), Arc::new(schema), Arc::new(props)).unwrap();
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
        use parquet::file::properties::WriterProperties;
        use parquet::file::reader::{FileReader, SerializedFileReader};
        use parquet::file::writer::SerializedFileWriter;
        use parquet::record::Field;
        use std::sync::Arc;

        let schema = parquet::schema::parser::parse_message_type("message t { optional int32 v; }").unwrap();
        let mut file = SerializedFileWriter::new(
            Vec::new(),
            Arc::new(schema),
            Arc::new(WriterProperties::builder().build()),
        )
        .unwrap();
        let mut encoder = DictionaryEncoder::new(1);
        let expected: Vec<Option<i32>> =
            (0..50_000).map(|i| (i % 5 != 0).then_some((i / 100) % 40 - 3)).collect();
        let def: Vec<i16> = expected.iter().map(|v| v.is_some() as i16).collect();
        let values: Vec<i32> = expected.iter().flatten().copied().collect();
        let descr = file.schema_descr().clone();
        let mut group = file.next_row_group().unwrap();
        let (bytes, close) = encoder.int32_chunk(descr.column(0), &values, Some(&def)).unwrap().unwrap();
        group.append_column(&bytes, close).unwrap();
        group.close().unwrap();
        let many: Vec<i32> = (0..(INT_DICTIONARY_MAX as i32 + 1)).collect();
        assert!(encoder.int32_chunk(descr.column(0), &many, None).unwrap().is_none());

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

    #[test]
    fn the_hybrid_encoding_round_trips() {
        let mut seed = 7u64;
        for width in [1u8, 3, 8, 15, 17, 32] {
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

//! A column chunk's pages: the page sink and the chunk's metadata ([`Pages`]), the cutting
//! of a chunk into data pages with their definition levels, and the zstd compression of a
//! page's body.

use bytes::Bytes;
use parquet::basic::{Compression, Encoding, EncodingMask, PageType};
use parquet::column::page::{CompressedPage, Page, PageWriter};
use parquet::column::writer::ColumnCloseResult;
use parquet::errors::ParquetError;
use parquet::file::metadata::{ColumnChunkMetaData, PageEncodingStats};
use parquet::file::statistics::Statistics;
use parquet::file::writer::{SerializedPageWriter, TrackedWrite};
use parquet::schema::types::ColumnDescPtr;

use super::bits::rle_hybrid;
use super::err;

/// Values per data page.
const PAGE_VALUES: usize = 32 << 10;

/// A page's body, compressed (the compressor made on first use).
pub(super) fn compress(
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

/// A column chunk's pages as they are written (header and body each), and what its metadata
/// says of them.
pub(super) struct Pages {
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
    pub(super) fn dictionary(
        &mut self,
        buf: Bytes,
        uncompressed: usize,
        len: usize,
    ) -> Result<(), ParquetError> {
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
    pub(super) fn data(
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
    pub(super) fn finish(
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
pub(super) fn data_pages(
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

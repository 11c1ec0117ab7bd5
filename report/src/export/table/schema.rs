//! What a table's columns are and how a row fills them: the column specs (type, nullability,
//! encoding), the Parquet schema and writer properties made from them, the export's symbols
//! (strings stored once), and the per-partition column buffers a [`Row`] appends to.

use std::sync::Arc;

use bytes::Bytes;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::ColumnPath;

use super::writer::{ZSTD_LEVEL, parquet_err};

/// A column's physical type.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    I32,
    I64,
    Bool,
    Str,
}

/// How a column's values are encoded.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encode {
    /// Strings and int32 columns: dictionary-encoded by `export::encoding` (an int32 chunk of
    /// too many distinct values by the column writer, PLAIN); other types by the column
    /// writer, with its dictionary.
    Auto,
    /// Times and durations (int64): DELTA_BINARY_PACKED by `export::encoding`, not compressed.
    /// Bit-packed deltas of times leave zstd nothing to find (it wrote them 0.02 % larger on
    /// a 4 M-event run); durations come out 0.24 bytes a value larger than zstd made PLAIN
    /// values, for a small part of its work.
    Delta,
    /// Values too varied for a dictionary to pay (ids): PLAIN, left to zstd. A dictionary
    /// encoder hashes every value, and here its dictionary only grows.
    Plain,
    /// Int64 values that repeat but change from row to row (byte counts, return values):
    /// dictionary-encoded by `export::encoding`, which hashes only when the value changes, and
    /// zstd then compresses the keys, a quarter of the PLAIN bytes or less; a chunk of too
    /// many distinct values goes to the column writer, PLAIN with zstd.
    Dictionary,
}

/// How a column is written.
#[derive(Clone, Copy)]
pub(crate) struct Spec {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    /// May be null.
    pub(crate) optional: bool,
    pub(crate) encode: Encode,
}

pub(crate) const fn col(name: &'static str, kind: Kind) -> Spec {
    Spec { name, kind, optional: false, encode: Encode::Auto }
}

pub(crate) const fn opt(name: &'static str, kind: Kind) -> Spec {
    Spec { name, kind, optional: true, encode: Encode::Auto }
}

pub(crate) const fn delta(name: &'static str) -> Spec {
    Spec { name, kind: Kind::I64, optional: false, encode: Encode::Delta }
}

pub(crate) const fn plain(name: &'static str, kind: Kind) -> Spec {
    Spec { name, kind, optional: false, encode: Encode::Plain }
}

pub(crate) const fn dictionary(name: &'static str) -> Spec {
    Spec { name, kind: Kind::I64, optional: false, encode: Encode::Dictionary }
}

/// The strings of an export, each stored once; columns hold their index.
#[derive(Default)]
pub(crate) struct Symbols {
    pub(super) values: Vec<Bytes>,
}

impl Symbols {
    /// Adds a string; returns its index.
    pub(crate) fn add(&mut self, value: Bytes) -> u32 {
        self.values.push(value);
        (self.values.len() - 1) as u32
    }
}

pub(super) enum Values {
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    /// Indexes into [`Symbols`].
    Sym(Vec<u32>),
}

/// One column's buffered values; `def` holds the definition levels of an optional column
/// (1: a value, 0: null; nulls have no entry in `values`).
pub(super) struct Column {
    pub(super) values: Values,
    pub(super) def: Option<Vec<i16>>,
}

/// A row being added: the values go to the columns in schema order.
pub(crate) struct Row<'a> {
    pub(super) columns: &'a mut [Column],
    pub(super) at: usize,
}

impl Row<'_> {
    #[inline]
    fn next(&mut self) -> &mut Column {
        let at = self.at;
        self.at += 1;
        &mut self.columns[at]
    }

    #[inline]
    pub(crate) fn i32(&mut self, v: i32) -> &mut Self {
        let Values::I32(values) = &mut self.next().values else { mismatch("an i32") };
        values.push(v);
        self
    }

    #[inline]
    pub(crate) fn i64(&mut self, v: i64) -> &mut Self {
        let Values::I64(values) = &mut self.next().values else { mismatch("an i64") };
        values.push(v);
        self
    }

    #[inline]
    pub(crate) fn bool(&mut self, v: bool) -> &mut Self {
        let Values::Bool(values) = &mut self.next().values else { mismatch("a bool") };
        values.push(v);
        self
    }

    /// A string, as its index in [`Symbols`].
    #[inline]
    pub(crate) fn str(&mut self, v: u32) -> &mut Self {
        let Values::Sym(values) = &mut self.next().values else { mismatch("a string") };
        values.push(v);
        self
    }

    #[inline]
    fn null_or(&mut self, present: bool) -> &mut Column {
        let column = self.next();
        let Some(def) = &mut column.def else { mismatch("an optional value") };
        def.push(present as i16);
        column
    }

    #[inline]
    pub(crate) fn opt_i32(&mut self, v: Option<i32>) -> &mut Self {
        let Values::I32(values) = &mut self.null_or(v.is_some()).values else { mismatch("an i32") };
        values.extend(v);
        self
    }

    #[inline]
    pub(crate) fn opt_i64(&mut self, v: Option<i64>) -> &mut Self {
        let Values::I64(values) = &mut self.null_or(v.is_some()).values else { mismatch("an i64") };
        values.extend(v);
        self
    }

    #[inline]
    pub(crate) fn opt_str(&mut self, v: Option<u32>) -> &mut Self {
        let Values::Sym(values) = &mut self.null_or(v.is_some()).values else { mismatch("a string") };
        values.extend(v);
        self
    }
}

/// A row function gave a value its table's schema does not have there: a bug of the row
/// function (`rows.rs`), found by the first row pushed.
#[cold]
fn mismatch(what: &str) -> ! {
    panic!("a row gave {what} where its table's schema has another type of column (export/rows.rs)")
}

/// The Parquet schema of table `name` with columns `specs`, and its writer properties: the
/// encodings and compression the specs ask for, and what the file's metadata says of them.
pub(super) fn parquet_schema(
    name: &str,
    specs: &[Spec],
) -> std::io::Result<(Arc<parquet::schema::types::Type>, Arc<WriterProperties>)> {
    let fields: Vec<String> = specs
        .iter()
        .map(|s| {
            let repetition = if s.optional { "optional" } else { "required" };
            let ty = match s.kind {
                Kind::I32 => "int32",
                Kind::I64 => "int64",
                Kind::Bool => "boolean",
                Kind::Str => "binary",
            };
            let logical = if matches!(s.kind, Kind::Str) { " (STRING)" } else { "" };
            format!("{repetition} {ty} {}{logical};", s.name)
        })
        .collect();
    let schema =
        parse_message_type(&format!("message {name} {{ {} }}", fields.join(" "))).map_err(parquet_err)?;
    let mut props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(ZSTD_LEVEL).map_err(parquet_err)?))
        .set_created_by(format!("mlprof {}", env!("CARGO_PKG_VERSION")))
        // Min/max per column chunk lets engines skip row groups by time; page statistics
        // would cost time for little more.
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_dictionary_enabled(true);
    // What the column writer gets of these: PLAIN (a chunk the dictionary encoder
    // declined).
    for s in specs.iter().filter(|s| matches!(s.encode, Encode::Plain | Encode::Dictionary)) {
        props = props.set_column_dictionary_enabled(ColumnPath::from(s.name), false);
    }
    // Written by `export::encoding`; the properties say the same, for the file's metadata.
    for s in specs.iter().filter(|s| s.encode == Encode::Delta) {
        let path = ColumnPath::from(s.name);
        props = props
            .set_column_dictionary_enabled(path.clone(), false)
            .set_column_encoding(path.clone(), Encoding::DELTA_BINARY_PACKED)
            .set_column_compression(path, Compression::UNCOMPRESSED);
    }
    Ok((Arc::new(schema), Arc::new(props.build())))
}

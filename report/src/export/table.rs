//! One Parquet table of an export: column buffers per partition, flushed as row groups (by
//! size, or the largest partition first when the table holds too many rows), written to a
//! hidden temporary file per partition and renamed into place when the table is complete, so
//! a reader globbing `*.parquet` never sees half a file.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, Int32Type, Int64Type};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::ColumnPath;

/// Rows per row group when a partition fills one by itself.
const GROUP_ROWS: usize = 256 << 10;
/// Rows a table holds in memory at most, over all its partitions: the largest partition is
/// written out when they are more (about 60 MB for the events table).
const TABLE_BUDGET_ROWS: usize = 512 << 10;

/// A column's physical type.
#[derive(Clone, Copy)]
pub enum Kind {
    I32,
    I64,
    Bool,
    Str,
}

/// How a column is written.
#[derive(Clone, Copy)]
pub struct Spec {
    pub name: &'static str,
    pub kind: Kind,
    /// May be null.
    pub optional: bool,
    /// Times and other values that change by small steps: delta-encoded, no dictionary.
    pub delta: bool,
}

pub const fn col(name: &'static str, kind: Kind) -> Spec {
    Spec { name, kind, optional: false, delta: false }
}

pub const fn opt(name: &'static str, kind: Kind) -> Spec {
    Spec { name, kind, optional: true, delta: false }
}

pub const fn delta(name: &'static str) -> Spec {
    Spec { name, kind: Kind::I64, optional: false, delta: true }
}

enum Values {
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    Str(Vec<ByteArray>),
}

/// One column's buffered values; `def` holds the definition levels of an optional column
/// (1: a value, 0: null; nulls have no entry in `values`).
struct Column {
    values: Values,
    def: Option<Vec<i16>>,
}

/// A row being added: the values go to the columns in schema order.
pub struct Row<'a> {
    columns: &'a mut [Column],
    at: usize,
}

impl Row<'_> {
    fn next(&mut self) -> &mut Column {
        let at = self.at;
        self.at += 1;
        &mut self.columns[at]
    }

    pub fn i32(&mut self, v: i32) -> &mut Self {
        if let Values::I32(values) = &mut self.next().values {
            values.push(v);
        }
        self
    }

    pub fn i64(&mut self, v: i64) -> &mut Self {
        if let Values::I64(values) = &mut self.next().values {
            values.push(v);
        }
        self
    }

    pub fn bool(&mut self, v: bool) -> &mut Self {
        if let Values::Bool(values) = &mut self.next().values {
            values.push(v);
        }
        self
    }

    pub fn str(&mut self, v: &ByteArray) -> &mut Self {
        if let Values::Str(values) = &mut self.next().values {
            values.push(v.clone());
        }
        self
    }

    fn null_or(&mut self, present: bool) -> &mut Column {
        let column = self.next();
        if let Some(def) = &mut column.def {
            def.push(present as i16);
        }
        column
    }

    pub fn opt_i32(&mut self, v: Option<i32>) -> &mut Self {
        let column = self.null_or(v.is_some());
        if let (Values::I32(values), Some(v)) = (&mut column.values, v) {
            values.push(v);
        }
        self
    }

    pub fn opt_i64(&mut self, v: Option<i64>) -> &mut Self {
        let column = self.null_or(v.is_some());
        if let (Values::I64(values), Some(v)) = (&mut column.values, v) {
            values.push(v);
        }
        self
    }

    pub fn opt_str(&mut self, v: Option<&ByteArray>) -> &mut Self {
        let column = self.null_or(v.is_some());
        if let (Values::Str(values), Some(v)) = (&mut column.values, v) {
            values.push(v.clone());
        }
        self
    }
}

struct Partition {
    columns: Vec<Column>,
    rows: usize,
    /// (temporary path, final path, writer) once the first row group is written.
    file: Option<(PathBuf, PathBuf, SerializedFileWriter<BufWriter<File>>)>,
}

/// One table of one run: `DIR/<table>/run=<id>/[<key>=<value>/]part-0.parquet`.
pub struct Table {
    specs: &'static [Spec],
    /// `DIR/<table>/run=<id>`.
    dir: PathBuf,
    /// The partition column below the run (`rank`), if any.
    partition_by: Option<&'static str>,
    schema: Arc<parquet::schema::types::Type>,
    props: Arc<WriterProperties>,
    partitions: HashMap<String, Partition>,
    buffered: usize,
    pub rows: u64,
    pub bytes: u64,
}

fn parquet_err(e: parquet::errors::ParquetError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl Table {
    pub fn new(
        name: &str,
        specs: &'static [Spec],
        dir: &Path,
        partition_by: Option<&'static str>,
    ) -> std::io::Result<Table> {
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
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).map_err(parquet_err)?))
            .set_created_by(format!("mlprof {}", env!("CARGO_PKG_VERSION")))
            // Min/max per column chunk lets engines skip row groups by time; page statistics
            // would cost time for little more.
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .set_dictionary_enabled(true);
        for s in specs.iter().filter(|s| s.delta) {
            let path = ColumnPath::from(s.name);
            props = props
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_encoding(path, Encoding::DELTA_BINARY_PACKED);
        }
        Ok(Table {
            specs,
            dir: dir.to_path_buf(),
            partition_by,
            schema: Arc::new(schema),
            props: Arc::new(props.build()),
            partitions: HashMap::new(),
            buffered: 0,
            rows: 0,
            bytes: 0,
        })
    }

    fn empty_columns(specs: &[Spec]) -> Vec<Column> {
        specs
            .iter()
            .map(|s| Column {
                values: match s.kind {
                    Kind::I32 => Values::I32(Vec::new()),
                    Kind::I64 => Values::I64(Vec::new()),
                    Kind::Bool => Values::Bool(Vec::new()),
                    Kind::Str => Values::Str(Vec::new()),
                },
                def: s.optional.then(Vec::new),
            })
            .collect()
    }

    /// Adds a row to partition `key` (ignored for a table without partitions): fill it in
    /// schema order through `fill`.
    pub fn push(&mut self, key: &str, fill: impl FnOnce(&mut Row<'_>)) -> std::io::Result<()> {
        let specs = self.specs;
        let partition = match self.partitions.get_mut(key) {
            Some(p) => p,
            None => self.partitions.entry(key.to_string()).or_insert_with(|| Partition {
                columns: Table::empty_columns(specs),
                rows: 0,
                file: None,
            }),
        };
        fill(&mut Row { columns: &mut partition.columns, at: 0 });
        partition.rows += 1;
        self.buffered += 1;
        self.rows += 1;
        if partition.rows >= GROUP_ROWS {
            self.flush(&key.to_string())?;
        } else if self.buffered >= TABLE_BUDGET_ROWS {
            let largest = self.partitions.iter().max_by_key(|(_, p)| p.rows).map(|(k, _)| k.clone());
            if let Some(largest) = largest {
                self.flush(&largest)?;
            }
        }
        Ok(())
    }

    /// Writes partition `key`'s buffered rows as one row group.
    fn flush(&mut self, key: &String) -> std::io::Result<()> {
        let Some(partition) = self.partitions.get_mut(key) else { return Ok(()) };
        if partition.rows == 0 {
            return Ok(());
        }
        if partition.file.is_none() {
            let dir = match self.partition_by {
                Some(column) => self.dir.join(format!("{column}={key}")),
                None => self.dir.clone(),
            };
            std::fs::create_dir_all(&dir)?;
            let (tmp, done) = (dir.join(".part-0.parquet.tmp"), dir.join("part-0.parquet"));
            let out = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
            let writer = SerializedFileWriter::new(out, self.schema.clone(), self.props.clone())
                .map_err(parquet_err)?;
            partition.file = Some((tmp, done, writer));
        }
        let Some((_, _, writer)) = partition.file.as_mut() else { return Ok(()) };
        let mut group = writer.next_row_group().map_err(parquet_err)?;
        let mut columns = partition.columns.iter_mut();
        while let Some(mut out) = group.next_column().map_err(parquet_err)? {
            let Some(column) = columns.next() else { break };
            let def = column.def.as_deref();
            match &mut column.values {
                Values::I32(v) => {
                    out.typed::<Int32Type>().write_batch(v, def, None).map_err(parquet_err)?;
                    v.clear();
                }
                Values::I64(v) => {
                    out.typed::<Int64Type>().write_batch(v, def, None).map_err(parquet_err)?;
                    v.clear();
                }
                Values::Bool(v) => {
                    out.typed::<BoolType>().write_batch(v, def, None).map_err(parquet_err)?;
                    v.clear();
                }
                Values::Str(v) => {
                    out.typed::<ByteArrayType>().write_batch(v, def, None).map_err(parquet_err)?;
                    v.clear();
                }
            }
            if let Some(def) = &mut column.def {
                def.clear();
            }
            out.close().map_err(parquet_err)?;
        }
        group.close().map_err(parquet_err)?;
        self.buffered -= partition.rows;
        partition.rows = 0;
        Ok(())
    }

    /// Writes what is buffered and puts every file in place. A table with no row writes no
    /// file (engines read a missing partition as no rows).
    pub fn finish(mut self) -> std::io::Result<Table> {
        let keys: Vec<String> = self.partitions.keys().cloned().collect();
        for key in &keys {
            self.flush(key)?;
        }
        for (_, partition) in self.partitions.drain() {
            if let Some((tmp, done, writer)) = partition.file {
                writer.close().map_err(parquet_err)?;
                self.bytes += std::fs::metadata(&tmp)?.len();
                std::fs::rename(&tmp, &done)?;
            }
        }
        Ok(self)
    }
}

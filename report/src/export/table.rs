//! One Parquet table of an export: column buffers per partition, flushed as row groups (by
//! size, or the largest partition first when the table holds too many rows), written to a
//! hidden temporary file per partition and renamed into place when the table is complete, so
//! a reader globbing `*.parquet` never sees half a file.
//!
//! Strings are buffered as indexes into the export's [`Symbols`] (4 bytes a row, not a
//! reference-counted buffer) up to the page writer: string columns, int32 columns and the
//! int64 columns of few values are dictionary-encoded by `dictionary.rs`, times and durations
//! delta-encoded there too, the others written by the Parquet crate's column writer.
//! Encoding and compression run on the table's own thread, fed one row group at a time (with
//! the symbols added since the last) through a channel of one slot, while the caller decodes
//! the next events; a row group the thread is not ready for, the caller begins to encode
//! itself, a column at a time, until the thread takes it.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;

use bytes::Bytes;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::column::writer::ColumnCloseResult;
use parquet::data_type::{BoolType, Int32Type, Int64Type};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::SerializedFileWriter;

use parquet::schema::parser::parse_message_type;

use super::encoding::DictionaryEncoder;
use parquet::schema::types::{ColumnPath, SchemaDescriptor};

/// Rows per row group when a partition fills one by itself.
const GROUP_ROWS: usize = 256 << 10;
/// Rows a table holds in memory at most, over all its partitions: the largest partition is
/// written out when they are more (about 30 MB for the events table, at 58 bytes a row).
const TABLE_BUDGET_ROWS: usize = 512 << 10;
/// zstd's level for every page: 1 makes the events table no larger than 3 did (dictionary
/// and delta encodings leave little for zstd's longer searches) and costs less.
const ZSTD_LEVEL: i32 = 1;

/// A column's physical type.
#[derive(Clone, Copy)]
pub enum Kind {
    I32,
    I64,
    Bool,
    Str,
}

/// How a column's values are encoded.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Encode {
    /// Strings and int32 columns: dictionary-encoded by `dictionary.rs` (an int32 chunk of
    /// too many distinct values by the column writer, PLAIN); other types by the column
    /// writer, with its dictionary.
    Auto,
    /// Times and durations (int64): DELTA_BINARY_PACKED by `dictionary.rs`, not compressed.
    /// Bit-packed deltas of times leave zstd nothing to find (it wrote them 0.02 % larger on
    /// a 4 M-event run); durations come out 0.24 bytes a value larger than zstd made PLAIN
    /// values, for a small part of its work.
    Delta,
    /// Values too varied for a dictionary to pay (ids): PLAIN, left to zstd. A dictionary
    /// encoder hashes every value, and here its dictionary only grows.
    Plain,
    /// Int64 values that repeat but change from row to row (byte counts, return values):
    /// dictionary-encoded by `dictionary.rs`, which hashes only when the value changes, and
    /// zstd then compresses the keys, a quarter of the PLAIN bytes or less; a chunk of too
    /// many distinct values goes to the column writer, PLAIN with zstd.
    Dictionary,
}

/// How a column is written.
#[derive(Clone, Copy)]
pub struct Spec {
    pub name: &'static str,
    pub kind: Kind,
    /// May be null.
    pub optional: bool,
    pub encode: Encode,
}

pub const fn col(name: &'static str, kind: Kind) -> Spec {
    Spec { name, kind, optional: false, encode: Encode::Auto }
}

pub const fn opt(name: &'static str, kind: Kind) -> Spec {
    Spec { name, kind, optional: true, encode: Encode::Auto }
}

pub const fn delta(name: &'static str) -> Spec {
    Spec { name, kind: Kind::I64, optional: false, encode: Encode::Delta }
}

pub const fn plain(name: &'static str, kind: Kind) -> Spec {
    Spec { name, kind, optional: false, encode: Encode::Plain }
}

pub const fn dictionary(name: &'static str) -> Spec {
    Spec { name, kind: Kind::I64, optional: false, encode: Encode::Dictionary }
}

/// The strings of an export, each stored once; columns hold their index.
#[derive(Default)]
pub struct Symbols {
    values: Vec<Bytes>,
}

impl Symbols {
    /// Adds a string; returns its index.
    pub fn add(&mut self, value: Bytes) -> u32 {
        self.values.push(value);
        (self.values.len() - 1) as u32
    }
}

enum Values {
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    /// Indexes into [`Symbols`].
    Sym(Vec<u32>),
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
        let Values::I32(values) = &mut self.next().values else { mismatch("an i32") };
        values.push(v);
        self
    }

    pub fn i64(&mut self, v: i64) -> &mut Self {
        let Values::I64(values) = &mut self.next().values else { mismatch("an i64") };
        values.push(v);
        self
    }

    pub fn bool(&mut self, v: bool) -> &mut Self {
        let Values::Bool(values) = &mut self.next().values else { mismatch("a bool") };
        values.push(v);
        self
    }

    /// A string, as its index in [`Symbols`].
    pub fn str(&mut self, v: u32) -> &mut Self {
        let Values::Sym(values) = &mut self.next().values else { mismatch("a string") };
        values.push(v);
        self
    }

    fn null_or(&mut self, present: bool) -> &mut Column {
        let column = self.next();
        let Some(def) = &mut column.def else { mismatch("an optional value") };
        def.push(present as i16);
        column
    }

    pub fn opt_i32(&mut self, v: Option<i32>) -> &mut Self {
        let Values::I32(values) = &mut self.null_or(v.is_some()).values else { mismatch("an i32") };
        values.extend(v);
        self
    }

    pub fn opt_i64(&mut self, v: Option<i64>) -> &mut Self {
        let Values::I64(values) = &mut self.null_or(v.is_some()).values else { mismatch("an i64") };
        values.extend(v);
        self
    }

    pub fn opt_str(&mut self, v: Option<u32>) -> &mut Self {
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

struct Partition {
    key: String,
    columns: Vec<Column>,
    rows: usize,
}

/// A column of one row group, ready for the writer thread.
enum Batch {
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    /// Indexes into [`Symbols`].
    Sym(Vec<u32>),
}

/// A column chunk encoded by `dictionary.rs`: its bytes, and what `append_column` needs.
type Encoded = (Bytes, ColumnCloseResult);

/// One row group of one partition.
struct Job {
    partition: usize,
    dir: PathBuf,
    columns: Vec<(Batch, Option<Vec<i16>>)>,
    /// The symbols added since the table's last job.
    symbols: Vec<Bytes>,
    /// The first columns, encoded before the job was sent (by [`Table::hand_over`], while the
    /// writer thread was busy), in schema order (`None`: the Parquet crate's column writer
    /// takes it); the writer thread encodes those after them.
    encoded: Vec<Option<Encoded>>,
}

/// Encodes column `at` of a row group the way its spec says, if `dictionary.rs` does that
/// encoding (`None`: the Parquet crate's column writer takes the batch).
fn encode_column(
    encoder: &mut DictionaryEncoder,
    schema: &SchemaDescriptor,
    specs: &[Spec],
    at: usize,
    (batch, def): &(Batch, Option<Vec<i16>>),
) -> std::io::Result<Option<Encoded>> {
    let (descr, def) = (schema.column(at), def.as_deref());
    match (batch, specs.get(at).map_or(Encode::Auto, |s| s.encode)) {
        (Batch::Sym(v), _) => encoder.chunk(descr, v, def).map(Some),
        (Batch::I32(v), Encode::Auto) => encoder.int_chunk(descr, v, def),
        (Batch::I64(v), Encode::Delta) => encoder.delta_chunk(descr, v, def).map(Some),
        (Batch::I64(v), Encode::Dictionary) => encoder.int_chunk(descr, v, def),
        _ => Ok(None),
    }
    .map_err(parquet_err)
}

/// One table of one run: `DIR/<table>/run=<id>/[<key>=<value>/]part-0.parquet`.
pub struct Table {
    specs: &'static [Spec],
    /// `DIR/<table>/run=<id>`.
    dir: PathBuf,
    /// The partition column below the run (`rank`), if any.
    partition_by: Option<&'static str>,
    partitions: Vec<Partition>,
    by_key: HashMap<String, usize>,
    buffered: usize,
    /// The schema, for columns encoded by [`Table::close`].
    descr: Arc<SchemaDescriptor>,
    /// Tests: [`Table::close`] encodes every job itself, ready or not.
    encode_every_last_job: bool,
    /// The caller's own encoder, for the columns of jobs the writer thread is not ready for
    /// (see [`Table::hand_over`]).
    helper: DictionaryEncoder,
    /// How many of the export's symbols the writer thread has been sent.
    symbols_sent: usize,
    /// Row groups (`Some`), then `None` once every row is handed over (see `write_jobs`);
    /// the channel itself is `None` after that, or once the writer thread stopped.
    jobs: Option<SyncSender<Option<Job>>>,
    writer: Option<JoinHandle<std::io::Result<u64>>>,
    pub rows: u64,
    pub bytes: u64,
}

fn parquet_err(e: parquet::errors::ParquetError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// The writer thread: one open file per partition, a row group per job (`Some`). At `None`,
/// sent when the table has handed over all its rows, every file is closed and renamed into
/// place; a channel closed before that (the table abandoned, or dropped on an error) removes
/// the files begun, so that a failed export leaves no table that looks whole. Returns the
/// bytes written.
fn write_jobs(
    jobs: Receiver<Option<Job>>,
    specs: &'static [Spec],
    schema: Arc<parquet::schema::types::Type>,
    props: Arc<WriterProperties>,
) -> std::io::Result<u64> {
    let mut files: HashMap<usize, (PathBuf, PathBuf, SerializedFileWriter<BufWriter<File>>)> = HashMap::new();
    let mut encoder = DictionaryEncoder::new(ZSTD_LEVEL);
    let mut complete = false;
    for job in &jobs {
        let Some(job) = job else {
            complete = true;
            break;
        };
        encoder.extend(job.symbols);
        let writer = match files.entry(job.partition) {
            std::collections::hash_map::Entry::Occupied(entry) => &mut entry.into_mut().2,
            std::collections::hash_map::Entry::Vacant(entry) => {
                std::fs::create_dir_all(&job.dir)?;
                let (tmp, done) = (job.dir.join(".part-0.parquet.tmp"), job.dir.join("part-0.parquet"));
                // Small: a partitioned table keeps a file open per rank (64 MB of 1 MiB
                // buffers on a 64-rank job), and chunks larger than the buffer go straight
                // to the file.
                let out = BufWriter::with_capacity(1 << 16, File::create(&tmp)?);
                let writer =
                    SerializedFileWriter::new(out, schema.clone(), props.clone()).map_err(parquet_err)?;
                &mut entry.insert((tmp, done, writer)).2
            }
        };
        let descr = writer.schema_descr().clone();
        let mut group = writer.next_row_group().map_err(parquet_err)?;
        let mut encoded = job.encoded.into_iter();
        for (at, column) in job.columns.iter().enumerate() {
            let chunk = match encoded.next().flatten() {
                Some(chunk) => Some(chunk),
                None => encode_column(&mut encoder, &descr, specs, at, column)?,
            };
            let (batch, def) = (&column.0, column.1.as_deref());
            if let Some((bytes, close)) = chunk {
                group.append_column(&bytes, close).map_err(parquet_err)?;
                continue;
            }
            let Some(mut out) = group.next_column().map_err(parquet_err)? else { break };
            match batch {
                Batch::I32(v) => out.typed::<Int32Type>().write_batch(v, def, None),
                Batch::I64(v) => out.typed::<Int64Type>().write_batch(v, def, None),
                Batch::Bool(v) => out.typed::<BoolType>().write_batch(v, def, None),
                Batch::Sym(_) => unreachable!("written above"),
            }
            .map_err(parquet_err)?;
            out.close().map_err(parquet_err)?;
        }
        group.close().map_err(parquet_err)?;
    }
    if !complete {
        for (tmp, _, writer) in files.into_values() {
            drop(writer);
            std::fs::remove_file(&tmp)?;
        }
        return Ok(0);
    }
    let mut bytes = 0;
    for (_, (tmp, done, writer)) in files {
        writer.close().map_err(parquet_err)?;
        bytes += std::fs::metadata(&tmp)?.len();
        std::fs::rename(&tmp, &done)?;
    }
    Ok(bytes)
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
        // Written by `dictionary.rs`; the properties say the same, for the file's metadata.
        for s in specs.iter().filter(|s| s.encode == Encode::Delta) {
            let path = ColumnPath::from(s.name);
            props = props
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_encoding(path.clone(), Encoding::DELTA_BINARY_PACKED)
                .set_column_compression(path, Compression::UNCOMPRESSED);
        }
        let (schema, props) = (Arc::new(schema), Arc::new(props.build()));
        let descr = Arc::new(SchemaDescriptor::new(schema.clone()));
        let (jobs, receiver) = sync_channel(1);
        let writer = std::thread::Builder::new()
            .name(format!("parquet-{name}"))
            .spawn(move || write_jobs(receiver, specs, schema, props))?;
        Ok(Table {
            specs,
            dir: dir.to_path_buf(),
            partition_by,
            partitions: Vec::new(),
            by_key: HashMap::new(),
            buffered: 0,
            descr,
            encode_every_last_job: false,
            helper: DictionaryEncoder::new(ZSTD_LEVEL),
            symbols_sent: 0,
            jobs: Some(jobs),
            writer: Some(writer),
            rows: 0,
            bytes: 0,
        })
    }

    /// The partition with value `key` (ignored for a table without partitions), for `push`.
    pub fn partition(&mut self, key: &str) -> usize {
        if let Some(&at) = self.by_key.get(key) {
            return at;
        }
        let columns = self
            .specs
            .iter()
            .map(|s| Column {
                values: match s.kind {
                    Kind::I32 => Values::I32(Vec::new()),
                    Kind::I64 => Values::I64(Vec::new()),
                    Kind::Bool => Values::Bool(Vec::new()),
                    Kind::Str => Values::Sym(Vec::new()),
                },
                def: s.optional.then(Vec::new),
            })
            .collect();
        self.partitions.push(Partition { key: key.to_string(), columns, rows: 0 });
        self.by_key.insert(key.to_string(), self.partitions.len() - 1);
        self.partitions.len() - 1
    }

    /// Adds a row to partition `at` (from [`Table::partition`]): `fill` gives its values in
    /// schema order. `symbols` resolves the strings of row groups written out meanwhile.
    pub fn push(
        &mut self,
        symbols: &Symbols,
        at: usize,
        fill: impl FnOnce(&mut Row<'_>),
    ) -> std::io::Result<()> {
        let partition = &mut self.partitions[at];
        let mut row = Row { columns: &mut partition.columns, at: 0 };
        fill(&mut row);
        assert_eq!(
            row.at,
            row.columns.len(),
            "a row of {} values for a table of {} columns",
            row.at,
            row.columns.len()
        );
        partition.rows += 1;
        self.buffered += 1;
        self.rows += 1;
        if partition.rows >= GROUP_ROWS {
            self.flush(symbols, at)?;
        } else if self.buffered >= TABLE_BUDGET_ROWS {
            let largest = (0..self.partitions.len()).max_by_key(|&i| self.partitions[i].rows).unwrap_or(at);
            self.flush(symbols, largest)?;
        }
        Ok(())
    }

    /// Hands partition `at`'s buffered rows to the writer thread as one row group.
    fn flush(&mut self, symbols: &Symbols, at: usize) -> std::io::Result<()> {
        match self.take_job(symbols, at) {
            Some(job) => self.hand_over(symbols, job),
            None => Ok(()),
        }
    }

    /// Hands `job` to the writer thread. While the thread is busy with the one before, the
    /// caller encodes the job's columns itself, one at a time, offering the job after each
    /// (the writer encodes those left): on two cores the writer thread is the export's
    /// bottleneck, and the caller would otherwise wait idle for it.
    fn hand_over(&mut self, symbols: &Symbols, mut job: Job) -> std::io::Result<()> {
        loop {
            match self.jobs.as_ref().map(|jobs| jobs.try_send(Some(job))) {
                Some(Ok(())) => return Ok(()),
                Some(Err(TrySendError::Full(Some(busy)))) => job = busy,
                _ => return self.stopped(),
            }
            if !self.encode_next_column(symbols, &mut job)? {
                return self.send(job);
            }
        }
    }

    /// Encodes the first column of `job` not yet encoded, on the calling thread; `false` when
    /// none is left.
    fn encode_next_column(&mut self, symbols: &Symbols, job: &mut Job) -> std::io::Result<bool> {
        let at = job.encoded.len();
        let Some(column) = job.columns.get(at) else { return Ok(false) };
        self.helper.catch_up(&symbols.values);
        job.encoded.push(encode_column(&mut self.helper, &self.descr, self.specs, at, column)?);
        Ok(true)
    }

    /// Partition `at`'s buffered rows as one row group (`None`: it has none).
    fn take_job(&mut self, symbols: &Symbols, at: usize) -> Option<Job> {
        let partition = &mut self.partitions[at];
        if partition.rows == 0 {
            return None;
        }
        // The partition's next row group will likely be as large: its buffers start at that
        // capacity, not grown by doubling (copies, 3 % of a 64-rank export). Reserved pages
        // are only backed once written.
        let reserve = partition.rows;
        let partition = &mut self.partitions[at];
        fn take<T>(v: &mut Vec<T>, reserve: usize) -> Vec<T> {
            std::mem::replace(v, Vec::with_capacity(reserve))
        }
        let columns = partition
            .columns
            .iter_mut()
            .map(|column| {
                let batch = match &mut column.values {
                    Values::I32(v) => Batch::I32(take(v, reserve)),
                    Values::I64(v) => Batch::I64(take(v, reserve)),
                    Values::Bool(v) => Batch::Bool(take(v, reserve)),
                    Values::Sym(v) => Batch::Sym(take(v, reserve)),
                };
                (batch, column.def.as_mut().map(|def| take(def, reserve)))
            })
            .collect();
        let dir = match self.partition_by {
            Some(column) => self.dir.join(format!("{column}={}", partition.key)),
            None => self.dir.clone(),
        };
        self.buffered -= partition.rows;
        partition.rows = 0;
        let job = Job {
            partition: at,
            dir,
            columns,
            symbols: symbols.values[self.symbols_sent..].to_vec(),
            encoded: Vec::new(),
        };
        self.symbols_sent = symbols.values.len();
        Some(job)
    }

    /// Hands `job` to the writer thread, waiting for it to be ready.
    fn send(&mut self, job: Job) -> std::io::Result<()> {
        if self.jobs.as_ref().is_some_and(|jobs| jobs.send(Some(job)).is_ok()) {
            return Ok(());
        }
        self.stopped()
    }

    /// The writer thread stopped taking jobs: its error says why.
    fn stopped(&mut self) -> std::io::Result<()> {
        self.join().and(Err(std::io::Error::other("the Parquet writer thread stopped")))
    }

    fn join(&mut self) -> std::io::Result<u64> {
        self.jobs = None;
        match self.writer.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(std::io::Error::other("the Parquet writer thread panicked")),
            None => Ok(0),
        }
    }

    /// Hands what is buffered to the writer thread, which then puts every file in place,
    /// without waiting for it: tables closed one after another write their last rows side by
    /// side. The table takes no more rows; [`Table::finish`] waits for its writer.
    ///
    /// Every partition's last rows go at once, the table's whole budget of rows, each job
    /// through [`Table::hand_over`]: the export's loop is over, and the two cores share the
    /// work that is left.
    pub fn close(&mut self, symbols: &Symbols) -> std::io::Result<()> {
        for at in 0..self.partitions.len() {
            let Some(mut job) = self.take_job(symbols, at) else { continue };
            while self.encode_every_last_job && self.encode_next_column(symbols, &mut job)? {}
            self.hand_over(symbols, job)?;
        }
        // Every row handed over: the writer thread may put the files in place.
        if self.jobs.take().is_some_and(|jobs| jobs.send(None).is_err()) {
            return self.stopped();
        }
        Ok(())
    }

    /// Writes what is buffered and puts every file in place. A table with no row writes no
    /// file (engines read a missing partition as no rows).
    pub fn finish(mut self, symbols: &Symbols) -> std::io::Result<Table> {
        self.close(symbols)?;
        self.bytes = self.join()?;
        Ok(self)
    }
}

impl Drop for Table {
    /// A table dropped before [`Table::close`] (an abandoned export, an error on the way)
    /// puts nothing in place: its writer thread sees the channel end without the last
    /// message, and removes the files it began. One that was closed is waited for.
    fn drop(&mut self) {
        let _ = self.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPECS: &[Spec] = &[
        col("name", Kind::Str),
        col("pid", Kind::I32),
        delta("start_ns"),
        dictionary("bytes"),
        opt("path", Kind::Str),
        plain("id", Kind::I64),
        col("nested", Kind::Bool),
    ];

    /// Writes the same rows into 5 partitions, all still buffered when the table closes;
    /// `encode_here`: every last job encoded by `close` itself.
    fn write(dir: &Path, encode_here: bool) -> Vec<Vec<String>> {
        let _ = std::fs::remove_dir_all(dir);
        let mut symbols = Symbols::default();
        let names: Vec<u32> =
            ["read", "write", "openat"].map(|n| symbols.add(Bytes::from_static(n.as_bytes()))).into();
        let mut table = Table::new("t", SPECS, dir, Some("rank")).unwrap();
        table.encode_every_last_job = encode_here;
        let parts: Vec<usize> = (0..5).map(|r| table.partition(&r.to_string())).collect();
        for i in 0..20_000u32 {
            if i % 1000 == 0 {
                symbols.add(Bytes::from(format!("/data/file-{i}")));
            }
            let path = (i % 3 != 0).then(|| symbols.values.len() as u32 - 1);
            table
                .push(&symbols, parts[(i % 5) as usize], |row| {
                    row.str(names[(i % 3) as usize])
                        .i32((i % 5) as i32 + 100)
                        .i64(i as i64 * 1000)
                        .i64((i % 7) as i64 * 4096)
                        .opt_str(path)
                        .i64(i as i64 * 7919)
                        .bool(i % 2 == 0);
                })
                .unwrap();
        }
        let table = table.finish(&symbols).unwrap();
        assert_eq!(table.rows, 20_000);
        crate::export::tests::rows(dir)
    }

    /// Files under `dir`, hidden ones too, relative to it.
    fn files(dir: &Path) -> Vec<String> {
        let relative = |path: PathBuf| path.strip_prefix(dir).unwrap().display().to_string();
        crate::export::tests::files_under(dir).into_iter().map(relative).collect()
    }

    /// A table dropped before it was closed (an export that failed on the way) leaves no
    /// file, not even a hidden one; one closed and then dropped puts its files in place.
    #[test]
    fn only_a_closed_table_puts_files_in_place() {
        let dir = std::env::temp_dir().join(format!("mlprof-table-drop-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut symbols = Symbols::default();
        let name = symbols.add(Bytes::from_static(b"read"));
        let fill = |table: &mut Table, symbols: &Symbols| {
            let parts: Vec<usize> = (0..2).map(|r| table.partition(&r.to_string())).collect();
            // More rows than a row group per partition: each one's first row group is written
            // before the end.
            for i in 0..(2 * GROUP_ROWS + 10) as u32 {
                table
                    .push(symbols, parts[(i % 2) as usize], |row| {
                        row.str(name).i32(1).i64(i as i64).i64(8).opt_str(None).i64(i as i64).bool(false);
                    })
                    .unwrap();
            }
        };
        let mut dropped = Table::new("t", SPECS, &dir.join("dropped"), Some("rank")).unwrap();
        fill(&mut dropped, &symbols);
        // The writer thread has begun the partitions' files (hidden until complete).
        let begun = ["rank=0/.part-0.parquet.tmp", "rank=1/.part-0.parquet.tmp"];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while files(&dir.join("dropped")) != begun && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(files(&dir.join("dropped")), begun);
        drop(dropped);
        assert_eq!(files(&dir.join("dropped")), Vec::<String>::new());

        let mut closed = Table::new("t", SPECS, &dir.join("closed"), Some("rank")).unwrap();
        fill(&mut closed, &symbols);
        closed.close(&symbols).unwrap();
        drop(closed);
        assert_eq!(files(&dir.join("closed")), ["rank=0/part-0.parquet", "rank=1/part-0.parquet"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Chunks encoded by `close` (while the writer thread is busy) make the same files'
    /// rows as the writer thread's own.
    #[test]
    fn jobs_encoded_at_close_read_back_the_same() {
        let base = std::env::temp_dir().join(format!("mlprof-table-close-{}", std::process::id()));
        let by_writer = write(&base.join("writer"), false);
        let here = write(&base.join("here"), true);
        assert_eq!(by_writer.len(), 20_000);
        assert_eq!(by_writer[0][..3], ["\"read\"", "100", "0"]);
        assert_eq!(by_writer, here);
        let _ = std::fs::remove_dir_all(&base);
    }
}

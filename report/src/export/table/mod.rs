//! One Parquet table of an export: column buffers per partition, flushed as row groups (by
//! size, or the largest partition first when the table holds too many rows), written to a
//! hidden temporary file per partition and renamed into place when the table is complete, so
//! a reader globbing `*.parquet` never sees half a file.
//!
//! Strings are buffered as indexes into the export's [`Symbols`] (4 bytes a row, not a
//! reference-counted buffer) up to the page writer: string columns, int32 columns and the
//! int64 columns of few values are dictionary-encoded by `export::encoding`, times and durations
//! delta-encoded there too, the others written by the Parquet crate's column writer.
//! Encoding and compression run on the table's own thread, fed one row group at a time (with
//! the symbols added since the last) through a channel of one slot, while the caller decodes
//! the next events; a row group the thread is not ready for, the caller begins to encode
//! itself, a column at a time, until the thread takes it.

mod schema;
mod writer;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;

use parquet::schema::types::SchemaDescriptor;

use super::encoding::DictionaryEncoder;
use schema::{Column, Values, parquet_schema};
pub(crate) use schema::{Kind, Row, Spec, Symbols, col, delta, dictionary, opt, plain};
use writer::{Batch, Job, ZSTD_LEVEL, encode_column, write_jobs};

/// Rows per row group when a partition fills one by itself.
const GROUP_ROWS: usize = 256 << 10;
/// Rows a table holds in memory at most, over all its partitions: the largest partition is
/// written out when they are more (about 30 MB for the events table, at 58 bytes a row).
const TABLE_BUDGET_ROWS: usize = 512 << 10;

struct Partition {
    key: String,
    columns: Vec<Column>,
    rows: usize,
}

/// One table of one run: `DIR/<table>/run=<id>/[<key>=<value>/]part-0.parquet`.
pub(crate) struct Table {
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
    pub(crate) rows: u64,
    pub(crate) bytes: u64,
}

impl Table {
    pub(crate) fn new(
        name: &str,
        specs: &'static [Spec],
        dir: &Path,
        partition_by: Option<&'static str>,
    ) -> std::io::Result<Table> {
        let (schema, props) = parquet_schema(name, specs)?;
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
    pub(crate) fn partition(&mut self, key: &str) -> usize {
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
    pub(crate) fn push(
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
    pub(crate) fn close(&mut self, symbols: &Symbols) -> std::io::Result<()> {
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
    pub(crate) fn finish(mut self, symbols: &Symbols) -> std::io::Result<Table> {
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
mod tests;

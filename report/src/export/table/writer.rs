//! A table's writer thread and the row groups it is fed: one open file per partition, a row
//! group per job, column chunks encoded by the hand-written encoders where they apply and by
//! the Parquet crate's column writer otherwise; files renamed into place only when the table
//! is complete.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::Receiver;

use bytes::Bytes;
use parquet::column::writer::ColumnCloseResult;
use parquet::data_type::{BoolType, Int32Type, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::SchemaDescriptor;

use super::super::encoding::DictionaryEncoder;
use super::schema::{Encode, Spec};

/// zstd's level for every page: 1 makes the events table no larger than 3 did (dictionary
/// and delta encodings leave little for zstd's longer searches) and costs less.
pub(super) const ZSTD_LEVEL: i32 = 1;

/// A column of one row group, ready for the writer thread.
pub(super) enum Batch {
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    /// Indexes into [`super::Symbols`].
    Sym(Vec<u32>),
}

/// A column chunk encoded by `export::encoding`: its bytes, and what `append_column` needs.
pub(super) type Encoded = (Bytes, ColumnCloseResult);

/// One row group of one partition.
pub(super) struct Job {
    pub(super) partition: usize,
    pub(super) dir: PathBuf,
    pub(super) columns: Vec<(Batch, Option<Vec<i16>>)>,
    /// The symbols added since the table's last job.
    pub(super) symbols: Vec<Bytes>,
    /// The first columns, encoded before the job was sent (by [`super::Table::hand_over`], while the
    /// writer thread was busy), in schema order (`None`: the Parquet crate's column writer
    /// takes it); the writer thread encodes those after them.
    pub(super) encoded: Vec<Option<Encoded>>,
}

/// Encodes column `at` of a row group the way its spec says, if `export::encoding` does that
/// encoding (`None`: the Parquet crate's column writer takes the batch).
pub(super) fn encode_column(
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

pub(super) fn parquet_err(e: parquet::errors::ParquetError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// The writer thread: one open file per partition, a row group per job (`Some`). At `None`,
/// sent when the table has handed over all its rows, every file is closed and renamed into
/// place; a channel closed before that (the table abandoned, or dropped on an error) removes
/// the files begun, so that a failed export leaves no table that looks whole. Returns the
/// bytes written.
pub(super) fn write_jobs(
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

//! The `samples` table: one row per CPU sample (`mlprof-collect --sample`), in the order the
//! collector wrote them, with the innermost ITT task open on its thread when it was taken
//! (`mlprof hotspots`' attribution, [`crate::hotspots::attribute`]), its leaf frame named and
//! its stack folded (function names root to leaf, joined by `;`: the form flame graph tools
//! read, and `mlprof hotspots --folded` without the span). Frames are named as in traces and
//! in `hotspots` ([`crate::run::stack_names`]).
//!
//! Made when the export ends, from a read of its own: the samples come from the metadata
//! frames, and giving each its span takes a pass over the run's events, holding the samples
//! (about 50 bytes each) meanwhile, as `hotspots` does. A run without samples costs nothing.

use std::collections::HashMap;
use std::io;
use std::path::Path;

use bytes::Bytes;

use super::rows::{self, StackColumns};
use super::table::{Symbols, Table};
use super::table_dir;
use crate::hotspots::attribute::{read_samples, span_of_each};
use crate::run::RunMeta;
use crate::run::stack_names::StackNames;

/// The `samples` table of the run `meta` read from `source`, in `dir` under run id `id`,
/// partitioned by rank like the events (empty, and writing no file, for a run without
/// samples). The caller closes it.
pub(super) fn table(
    meta: &RunMeta,
    source: &Path,
    (dir, id): (&Path, &str),
    symbols: &mut Symbols,
) -> io::Result<Table> {
    let mut table = Table::new("samples", rows::SAMPLES, &table_dir(dir, "samples", id), Some("rank"))?;
    if !meta.has_samples() {
        return Ok(table);
    }
    let samples = read_samples(source).map_err(io::Error::other)?;
    let spans = span_of_each(source, &samples).map_err(io::Error::other)?;
    let mut texts = Texts { symbols, by_text: HashMap::new() };
    let mut columns = StackTexts::default();
    let mut span_symbols: HashMap<u64, Option<u32>> = HashMap::new();
    let mut parts: HashMap<(u32, Option<usize>), usize> = HashMap::new();
    for (sample, span) in samples.iter().zip(spans) {
        let span =
            *span_symbols.entry(span).or_insert_with(|| (span != 0).then(|| texts.add(&meta.string(span))));
        let stack = columns.of(meta, sample.stack, &mut texts);
        let image = meta.image_at(sample.pid, sample.time_ns);
        let part = *parts.entry((sample.pid, image)).or_insert_with(|| {
            // As the events: the rank of the image running then (`none` without one).
            let rank = image.and_then(|i| meta.images[&sample.pid][i].info.rank.as_ref());
            table.partition(&rank.map_or("none".to_string(), |r| r.rank.to_string()))
        });
        table.push(texts.symbols, part, |row| rows::sample(row, sample, span, stack))?;
    }
    Ok(table)
}

/// Strings as the export's symbols, each added once.
struct Texts<'s> {
    symbols: &'s mut Symbols,
    by_text: HashMap<String, u32>,
}

impl Texts<'_> {
    fn add(&mut self, text: &str) -> u32 {
        if let Some(&symbol) = self.by_text.get(text) {
            return symbol;
        }
        let symbol = self.symbols.add(Bytes::copy_from_slice(text.as_bytes()));
        self.by_text.insert(text.to_string(), symbol);
        symbol
    }
}

/// The columns of each stack, made once per stack.
#[derive(Default)]
struct StackTexts {
    names: StackNames,
    by_stack: HashMap<u32, StackColumns>,
}

impl StackTexts {
    /// The columns of the run's stack `id` (all null for a stack not unwound, or unknown).
    fn of(&mut self, meta: &RunMeta, id: u32, texts: &mut Texts<'_>) -> StackColumns {
        if let Some(&columns) = self.by_stack.get(&id) {
            return columns;
        }
        let mut columns = StackColumns::default();
        let mut labels = self.names.labels(meta, id);
        if let Some((leaf, module)) = labels.first() {
            columns.leaf_function = Some(texts.add(leaf));
            columns.leaf_module = module.as_deref().map(|m| texts.add(m));
            labels.reverse();
            let path: Vec<&str> = labels.iter().map(|(label, _)| label.as_str()).collect();
            columns.stack = Some(texts.add(&path.join(";")));
        }
        self.by_stack.insert(id, columns);
        columns
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::rows;
    use super::super::{export_parquet, table_dir};
    use mlprof_format::func::Func;
    use mlprof_format::record::IttSpan;
    use mlprof_format::runfile::{RunEnd, RunInfo, RunWriter};
    use mlprof_format::sample::{CpuSample, ModuleInfo, NO_MODULE, SamplingInfo, StackFrame, StackInfo};
    use mlprof_format::string_id;

    /// Samples inside a task and outside any, one not unwound, on frames no symbol names
    /// (a module that is not there, an address in no module): each a row, in file order, with
    /// its span, its leaf and its folded stack, as `mlprof hotspots` names them.
    #[test]
    fn each_sample_is_a_row_with_its_span_and_stack() {
        let dir = std::env::temp_dir().join(format!("mlprof-export-samples-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let run = dir.join("run.bin");
        let start = 1_000_000u64;
        let mut w = RunWriter::create(&run, &RunInfo { start_mono_ns: start, ..RunInfo::default() }).unwrap();
        w.write_string(string_id(b"fetch"), b"fetch").unwrap();
        w.write_module(&ModuleInfo { id: 1, path: "/nonexistent/libx.so".into(), build_id: vec![] }).unwrap();
        let frames =
            vec![StackFrame { module: 1, offset: 0x10 }, StackFrame { module: NO_MODULE, offset: 0x7f00 }];
        w.write_stack(&StackInfo { id: 1, frames, truncated: false }).unwrap();
        let sample = |at, tid, stack| CpuSample { time_ns: start + at, pid: 7, tid, stack };
        w.write_samples(&[sample(110, 7, 1), sample(150, 8, 1), sample(250, 7, 1), sample(120, 7, 0)])
            .unwrap();
        let task = IttSpan {
            kind: Func::IttTask as u16,
            pid: 7,
            tid: 7,
            start: start + 100,
            dur: 100,
            name: string_id(b"fetch"),
            ..IttSpan::default()
        };
        w.write_events(&[task.into_event()]).unwrap();
        let info = SamplingInfo { hz: 99, samples: 4, lost: 0, refused: String::new(), stack_bytes: 8192 };
        w.write_sampling(&info).unwrap();
        w.finish(&RunEnd::default()).unwrap();

        let out = dir.join("parquet");
        let exported = export_parquet(&run, &out, &mut |_| {}).unwrap();
        assert!(exported.rows.contains(&("samples", 4)), "{:?}", exported.rows);
        let got = rows(&table_dir(&out, "samples", &exported.run_id));
        std::fs::remove_dir_all(&dir).unwrap();
        let stack = ["\"libx.so+0x10\"", "\"libx.so\"", "\"0x7f00;libx.so+0x10\""];
        let row = |at: u64, tid: u32, span: &str, stack: [&str; 3]| {
            let mut row = vec![(start + at).to_string(), "7".into(), tid.to_string(), span.to_string()];
            row.extend(stack.map(str::to_string));
            row
        };
        // The second sample is another thread's, which the task does not hold.
        let want = [
            row(110, 7, "\"fetch\"", stack),
            row(150, 8, "null", stack),
            row(250, 7, "null", stack),
            row(120, 7, "\"fetch\"", ["null"; 3]),
        ];
        assert_eq!(got, want);
    }
}

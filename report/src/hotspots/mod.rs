//! `mlprof hotspots`: where the CPU went inside each span (issue 37). The collector's sampled
//! stacks (`mlprof-collect --sample`, [`mlprof_format::sample`]) are each given to the ITT
//! spans open on their thread when they were taken (an op, a transform, a batch fetch, a
//! training phase; "outside any span" when none), a span's samples including those of the
//! spans inside it (`transform:Normalize` holds the samples of its `aten::sub_` and
//! `aten::div_`), and their frames are named from the modules' symbol tables
//! ([`mlprof_symbols`]). Per span name: the samples, the CPU time they stand for (samples ÷
//! rate), and the functions by *self* (the leaf) and *total* (anywhere in the stack, once per
//! sample) sample counts.
//!
//! Three passes over the file: the metadata (strings, modules, stacks), the samples (events
//! skipped), then the spans (events), each span taking the samples of its thread inside it.

pub(crate) mod attribute;
pub mod render;

use std::collections::HashMap;
use std::path::Path;

use crate::run::RunMeta;
use crate::run::stack_names::StackNames;

/// The name of the samples no span holds.
pub const OUTSIDE: &str = "(outside any span)";

/// What `mlprof hotspots` shows.
#[derive(Debug, Clone, Default)]
pub struct Hotspots {
    /// Samples a second, per running thread.
    pub hz: u32,
    pub samples: u64,
    pub lost: u64,
    /// Why there are no samples (empty: sampling ran, or was not asked for).
    pub refused: String,
    /// Most samples first.
    pub spans: Vec<SpanHotspots>,
    /// Folded stacks: (span, functions root first, samples), sorted; for `--folded` and the
    /// report's flame graphs.
    pub folded: Vec<Folded>,
}

/// One distinct stack of a span: (span, functions root first, samples).
pub type Folded = (String, Vec<String>, u64);

/// The samples of one span name.
#[derive(Debug, Clone, Default)]
pub struct SpanHotspots {
    pub span: String,
    pub samples: u64,
    /// Most self samples first, then most total.
    pub functions: Vec<FunctionShare>,
}

/// One function's share of a span's samples.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FunctionShare {
    pub function: String,
    /// The module's file name (`libc.so.6`); empty for an address in no module.
    pub module: String,
    /// Samples with this function as the leaf.
    pub self_samples: u64,
    /// Samples with this function anywhere in the stack (once per sample).
    pub total_samples: u64,
}

/// Which spans, and how many functions each.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Only spans of this name (`None`: all).
    pub span: Option<String>,
    /// Functions per span.
    pub top: usize,
}

/// Computes the hotspots of the run at `path`.
pub fn compute(path: &Path, options: &Options) -> Result<Hotspots, String> {
    let meta = RunMeta::load_without_events(path)?;
    let mut hotspots = Hotspots::default();
    if let Some(info) = &meta.sampling {
        (hotspots.hz, hotspots.samples, hotspots.lost) = (info.hz, info.samples, info.lost);
        hotspots.refused = info.refused.clone();
    }
    if !meta.has_samples() {
        // Not recorded with --sample: no pass over the events.
        return Ok(hotspots);
    }
    let samples = attribute::read_samples(path)?;
    if meta.capture.is_some() {
        // Those inside the capture ranges (the sampler counted every one).
        hotspots.samples = samples.len() as u64;
    }
    let spans = attribute::attribute(path, samples)?;
    let mut names = StackNames::default();
    let mut by_span: HashMap<String, SpanTally> = HashMap::new();
    for (span_ids, stack) in spans {
        let names: Vec<String> = if span_ids.is_empty() {
            vec![OUTSIDE.to_string()]
        } else {
            span_ids
                .iter()
                .map(|&id| if id == 0 { "(unnamed)".to_string() } else { meta.string(id) })
                .collect()
        };
        for span in names {
            if options.span.as_ref().is_some_and(|only| *only != span) {
                continue;
            }
            let tally = by_span.entry(span).or_default();
            tally.samples += 1;
            *tally.stacks.entry(stack).or_default() += 1;
        }
    }
    for (span, tally) in by_span {
        let (functions, folded) = tally.functions(&meta, &mut names);
        hotspots.folded.extend(folded.into_iter().map(|(path, count)| (span.clone(), path, count)));
        let mut functions: Vec<FunctionShare> = functions.into_values().collect();
        functions.sort_by(|a, b| {
            (b.self_samples, b.total_samples)
                .cmp(&(a.self_samples, a.total_samples))
                .then(a.function.cmp(&b.function))
        });
        functions.truncate(options.top);
        hotspots.spans.push(SpanHotspots { span, samples: tally.samples, functions });
    }
    hotspots.spans.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.span.cmp(&b.span)));
    hotspots.folded.sort();
    Ok(hotspots)
}

/// Functions by (name, module), with their shares.
type Shares = HashMap<(String, String), FunctionShare>;

/// One span name's samples, by stack.
#[derive(Default)]
struct SpanTally {
    samples: u64,
    stacks: HashMap<u32, u64>,
}

impl SpanTally {
    /// Its functions' shares, and its folded stacks (functions root first → samples: stacks
    /// that differ only in return addresses within the same functions read the same).
    fn functions(&self, meta: &RunMeta, names: &mut StackNames) -> (Shares, HashMap<Vec<String>, u64>) {
        let mut functions: Shares = HashMap::new();
        let mut folded: HashMap<Vec<String>, u64> = HashMap::new();
        for (&stack, &count) in &self.stacks {
            let frames = names.labels(meta, stack);
            let mut seen = std::collections::HashSet::new();
            for (at, (function, module)) in frames.iter().enumerate() {
                let module = module.as_deref().unwrap_or("").to_string();
                let key = (function.clone(), module.clone());
                let share = functions.entry(key.clone()).or_insert_with(|| FunctionShare {
                    function: function.clone(),
                    module: module.clone(),
                    ..FunctionShare::default()
                });
                if at == 0 {
                    share.self_samples += count;
                }
                if seen.insert(key) {
                    share.total_samples += count;
                }
            }
            let mut path: Vec<String> = frames.iter().rev().map(|(function, _)| function.clone()).collect();
            if path.is_empty() {
                path.push("(no stack)".into());
            }
            *folded.entry(path).or_default() += count;
        }
        (functions, folded)
    }
}

#[cfg(test)]
mod tests;

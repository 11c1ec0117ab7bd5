//! `mlprof hotspots`: where the CPU went inside each span (issue 37). The collector's sampled
//! stacks (`mlprof-collect --sample`, [`mlprof_format::sample`]) are each given to the
//! innermost ITT span open on their thread when they were taken (an op, a transform, a batch
//! fetch, a training phase; "outside any span" otherwise), and their frames are named from
//! the modules' symbol tables ([`mlprof_symbols`]). Per span: the samples, the CPU time they
//! stand for (samples ÷ rate), and the functions by *self* (the leaf) and *total* (anywhere
//! in the stack, once per sample) sample counts.
//!
//! Three passes over the file: the metadata (strings, modules, stacks), the samples (events
//! skipped), then the spans (events), each span taking the samples of its thread that fall
//! inside it unless a span inside it (started later) has them.

pub(crate) mod attribute;
pub mod render;

use std::collections::HashMap;
use std::path::Path;

use mlprof_format::runfile::{Frame, RunReader};
use mlprof_format::sample::{CpuSample, NO_MODULE, StackFrame};
use mlprof_symbols::Symbolizer;

use crate::run::RunMeta;

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
    /// Folded stacks (`span;root;…;leaf` → samples), for `--folded`.
    pub folded: Vec<(String, u64)>,
}

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
    let samples = read_samples(path)?;
    let spans = attribute::attribute(path, samples)?;
    let mut names = Names { meta: &meta, symbolizer: Symbolizer::new(), frames: HashMap::new() };
    let mut by_span: HashMap<String, SpanTally> = HashMap::new();
    for (span, stack) in spans {
        let span = if span == 0 { OUTSIDE.to_string() } else { meta.string(span) };
        if options.span.as_ref().is_some_and(|only| *only != span) {
            continue;
        }
        let tally = by_span.entry(span).or_default();
        tally.samples += 1;
        *tally.stacks.entry(stack).or_default() += 1;
    }
    for (span, tally) in by_span {
        let (functions, folded) = tally.functions(&span, &mut names);
        hotspots.folded.extend(folded);
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
    // Stacks that differ only in return addresses within the same functions read the same.
    let mut folded: HashMap<String, u64> = HashMap::new();
    for (line, count) in std::mem::take(&mut hotspots.folded) {
        *folded.entry(line).or_default() += count;
    }
    hotspots.folded = folded.into_iter().collect();
    hotspots.folded.sort();
    Ok(hotspots)
}

/// Every sample of the run, read with the events skipped.
fn read_samples(path: &Path) -> Result<Vec<CpuSample>, String> {
    let mut reader = RunReader::open_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut samples = Vec::new();
    while let Some(frame) = reader.next_frame().map_err(|e| format!("{}: {e}", path.display()))? {
        if let Frame::Samples(batch) = frame {
            samples.extend(batch);
        }
    }
    Ok(samples)
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
    /// Its functions' shares, and its folded stacks.
    fn functions(&self, span: &str, names: &mut Names<'_>) -> (Shares, Vec<(String, u64)>) {
        let mut functions: Shares = HashMap::new();
        let mut folded = Vec::new();
        for (&stack, &count) in &self.stacks {
            let frames = names.stack(stack);
            let mut seen = std::collections::HashSet::new();
            for (at, (function, module)) in frames.iter().enumerate() {
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
            let path: Vec<&str> = frames.iter().rev().map(|(function, _)| function.as_str()).collect();
            let line = if path.is_empty() {
                format!("{span};(no stack)")
            } else {
                format!("{span};{}", path.join(";"))
            };
            folded.push((line, count));
        }
        (functions, folded)
    }
}

/// Stack frames named: (function, module file name), leaf first.
struct Names<'m> {
    meta: &'m RunMeta,
    symbolizer: Symbolizer,
    frames: HashMap<(StackFrame, bool), (String, String)>,
}

impl Names<'_> {
    fn stack(&mut self, id: u32) -> Vec<(String, String)> {
        let Some(stack) = self.meta.stacks.get(&id) else { return Vec::new() };
        let frames = stack.frames.clone();
        frames.iter().enumerate().map(|(at, frame)| self.frame(*frame, at > 0)).collect()
    }

    /// A frame's function and module; `returns`: the address is a return address (every frame
    /// but the leaf), which may be one past the calling function's end.
    fn frame(&mut self, frame: StackFrame, returns: bool) -> (String, String) {
        if let Some(named) = self.frames.get(&(frame, returns)) {
            return named.clone();
        }
        let named = match self.meta.modules.get(&frame.module) {
            Some(module) if frame.module != NO_MODULE => {
                let file = Path::new(&module.path).file_name().map(|f| f.to_string_lossy().into_owned());
                let file = file.unwrap_or_else(|| module.path.clone());
                let offset = frame.offset.saturating_sub(u64::from(returns));
                let function = self.symbolizer.function_at_offset(Path::new(&module.path), offset);
                let function =
                    function.map(str::to_string).unwrap_or_else(|| format!("{file}+0x{:x}", frame.offset));
                (function, file)
            }
            _ => (format!("0x{:x}", frame.offset), String::new()),
        };
        self.frames.insert((frame, returns), named.clone());
        named
    }
}

#[cfg(test)]
mod tests;

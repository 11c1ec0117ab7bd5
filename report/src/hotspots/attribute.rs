//! Each sample to the ITT spans open on its thread when it was taken: a span holds the samples
//! of its thread inside `[start, start + dur)`, those of the spans inside it included (an op
//! inside a transform counts for both, as a flame graph's frames do), each span name once per
//! sample (a span nested in one of its own name counts once). Spans that hold a sample are
//! nested on its thread, so the innermost is the one that started last: what a list of samples
//! one by one names (the export's `samples` table).

use std::collections::HashMap;
use std::path::Path;

use mlprof_format::func::Func;
use mlprof_format::record::IttSpan;
use mlprof_format::runfile::Frame;
use mlprof_format::sample::CpuSample;

/// The spans that hold one sample.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Held {
    /// Every span name (string id) open on its thread, each once.
    pub(crate) spans: Vec<u64>,
    /// The innermost one's name (0: none).
    pub(crate) innermost: u64,
    /// Its start (to tell a later-started span).
    innermost_start: u64,
}

/// A sample waiting for its spans.
struct Pending {
    time_ns: u64,
    /// Its index in the samples given.
    index: usize,
    held: Held,
}

/// Every sample of the run at `path`, in file order, read with the events skipped.
pub(crate) fn read_samples(path: &Path) -> Result<Vec<CpuSample>, String> {
    let mut reader = mlprof_format::runfile::RunReader::open_metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let (mut samples, mut capture, mut edges, mut start, mut end) = (Vec::new(), None, Vec::new(), 0, 0);
    while let Some(frame) = reader.next_frame().map_err(|e| format!("{}: {e}", path.display()))? {
        match frame {
            Frame::Samples(batch) => samples.extend(batch),
            Frame::Capture(info) => capture = Some(info),
            Frame::RangeEdge(edge) => edges.push(edge),
            Frame::RunInfo(info) => start = info.start_mono_ns,
            Frame::End(run_end) => end = run_end.end_ns,
            _ => {}
        }
    }
    // Samples follow the capture ranges (the sampler runs regardless of them).
    crate::run::ranges::Window::new(capture.as_ref(), &edges, start, end.max(start))
        .keep_samples(&mut samples);
    Ok(samples)
}

/// `(span name ids, stack id)` of every sample (no span: outside any).
pub(super) fn attribute(path: &Path, samples: Vec<CpuSample>) -> Result<Vec<(Vec<u64>, u32)>, String> {
    let held = held_of_each(path, &samples)?;
    Ok(held.into_iter().zip(samples).map(|(held, sample)| (held.spans, sample.stack)).collect())
}

/// The innermost span name id of each of `samples` (of the run at `path`), in their order (0:
/// outside any span), for the clients that list samples one by one (the export's `samples`
/// table).
pub(crate) fn span_of_each(path: &Path, samples: &[CpuSample]) -> Result<Vec<u64>, String> {
    Ok(held_of_each(path, samples)?.into_iter().map(|held| held.innermost).collect())
}

/// The spans that hold each of `samples`, in their order.
fn held_of_each(path: &Path, samples: &[CpuSample]) -> Result<Vec<Held>, String> {
    let mut by_thread: HashMap<(u32, u32), Vec<Pending>> = HashMap::new();
    for (index, s) in samples.iter().enumerate() {
        by_thread.entry((s.pid, s.tid)).or_default().push(Pending {
            time_ns: s.time_ns,
            index,
            held: Held::default(),
        });
    }
    for pending in by_thread.values_mut() {
        pending.sort_by_key(|p| p.time_ns);
    }
    if !by_thread.is_empty() {
        let mut reader = crate::run::open(path)?;
        while let Some(frame) = reader.next_frame().map_err(|e| format!("{}: {e}", path.display()))? {
            let Frame::Events(events) = frame else { continue };
            for event in events.iter().filter(|e| e.kind == Func::IttTask as u16 && e.dur > 0) {
                let span = IttSpan::from_event(event);
                if let Some(pending) = by_thread.get_mut(&(span.pid, span.tid)) {
                    take(pending, &span);
                }
            }
        }
    }
    let mut held = vec![Held::default(); samples.len()];
    for pending in by_thread.into_values().flatten() {
        held[pending.index] = pending.held;
    }
    Ok(held)
}

/// Gives `span` the samples of its thread inside it (`pending` sorted by time).
fn take(pending: &mut [Pending], span: &IttSpan) {
    let end = span.start.saturating_add(span.dur);
    let first = pending.partition_point(|p| p.time_ns < span.start);
    for sample in pending.iter_mut().skip(first).take_while(|p| p.time_ns < end) {
        let held = &mut sample.held;
        if !held.spans.contains(&span.name) {
            held.spans.push(span.name);
        }
        if held.innermost == 0 || span.start >= held.innermost_start {
            (held.innermost, held.innermost_start) = (span.name, span.start);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: u64, dur: u64, name: u64) -> IttSpan {
        IttSpan { kind: Func::IttTask as u16, start, dur, name, ..IttSpan::default() }
    }

    /// An op inside a batch fetch, and an op of the same name inside that op: the fetch holds
    /// every sample inside it, the op those inside it, once however deep it nests; the
    /// innermost is the op, in whatever order the spans come.
    #[test]
    fn a_span_holds_the_samples_of_the_spans_inside_it() {
        for inner_first in [true, false] {
            let mut pending: Vec<Pending> = [5, 15, 25, 35, 45]
                .iter()
                .enumerate()
                .map(|(index, &t)| Pending { time_ns: t, index, held: Held::default() })
                .collect();
            let mut spans = vec![span(22, 5, 2), span(20, 10, 2), span(10, 30, 1)];
            if !inner_first {
                spans.reverse();
            }
            for s in &spans {
                take(&mut pending, s);
            }
            let mut held: Vec<(Vec<u64>, u64)> =
                pending.iter().map(|p| (p.held.spans.clone(), p.held.innermost)).collect();
            for (spans, _) in &mut held {
                spans.sort_unstable();
            }
            // 5: before all; 15: fetch; 25: op (twice nested, once) and fetch; 35: fetch; 45:
            // after (end is exclusive).
            let want = [(vec![], 0), (vec![1], 1), (vec![1, 2], 2), (vec![1], 1), (vec![], 0)];
            assert_eq!(held, want, "inner first: {inner_first}");
        }
    }
}

//! Each sample to the innermost ITT span open on its thread when it was taken. Spans that hold
//! a sample are nested on its thread, so the innermost is the one that started last; a span
//! takes the samples of its thread inside `[start, start + dur)` unless a span that started
//! later has them already.

use std::collections::HashMap;
use std::path::Path;

use mlprof_format::func::Func;
use mlprof_format::record::IttSpan;
use mlprof_format::runfile::Frame;
use mlprof_format::sample::CpuSample;

/// A sample waiting for its span.
struct Pending {
    time_ns: u64,
    /// Its index in the samples given.
    index: usize,
    /// The start of the span that holds it so far (0: none).
    span_start: u64,
    /// That span's name (string id; 0: none).
    span: u64,
}

/// `(span name id, stack id)` of every sample (span 0: outside any span).
pub(super) fn attribute(path: &Path, samples: Vec<CpuSample>) -> Result<Vec<(u64, u32)>, String> {
    let spans = span_of_each(path, &samples)?;
    Ok(spans.into_iter().zip(samples).map(|(span, sample)| (span, sample.stack)).collect())
}

/// The span name id of each of `samples` (of the run at `path`), in their order (0: outside
/// any span): what `mlprof hotspots` gives them, for the clients that list samples one by one
/// (the export's `samples` table).
pub(crate) fn span_of_each(path: &Path, samples: &[CpuSample]) -> Result<Vec<u64>, String> {
    let mut by_thread: HashMap<(u32, u32), Vec<Pending>> = HashMap::new();
    for (index, s) in samples.iter().enumerate() {
        by_thread.entry((s.pid, s.tid)).or_default().push(Pending {
            time_ns: s.time_ns,
            index,
            span_start: 0,
            span: 0,
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
    let mut spans = vec![0; samples.len()];
    for pending in by_thread.into_values().flatten() {
        spans[pending.index] = pending.span;
    }
    Ok(spans)
}

/// Gives `span` the samples of its thread inside it that no later-started span holds.
fn take(pending: &mut [Pending], span: &IttSpan) {
    let end = span.start.saturating_add(span.dur);
    let first = pending.partition_point(|p| p.time_ns < span.start);
    for sample in pending.iter_mut().skip(first).take_while(|p| p.time_ns < end) {
        if sample.span == 0 || span.start >= sample.span_start {
            sample.span_start = span.start;
            sample.span = span.name;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: u64, dur: u64, name: u64) -> IttSpan {
        IttSpan { kind: Func::IttTask as u16, start, dur, name, ..IttSpan::default() }
    }

    /// An op inside a batch fetch: the op's samples are the op's, the rest the fetch's, in
    /// whatever order the two spans come (the file writes a span when it ends: inner first).
    #[test]
    fn the_innermost_span_takes_its_samples() {
        for outer_first in [true, false] {
            let mut pending: Vec<Pending> = [5, 15, 25, 35, 45]
                .iter()
                .map(|&t| Pending { time_ns: t, index: t as usize, span_start: 0, span: 0 })
                .collect();
            let (outer, inner) = (span(10, 30, 1), span(20, 10, 2));
            if outer_first {
                take(&mut pending, &outer);
                take(&mut pending, &inner);
            } else {
                take(&mut pending, &inner);
                take(&mut pending, &outer);
            }
            let spans: Vec<u64> = pending.iter().map(|p| p.span).collect();
            // 5: before both; 15: fetch; 25: op; 35: fetch; 45: after both (end is exclusive).
            assert_eq!(spans, [0, 1, 2, 1, 0], "outer first: {outer_first}");
        }
    }
}

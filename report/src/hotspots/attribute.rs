//! Each sample to the ITT spans open on its thread when it was taken: a span holds the samples
//! of its thread inside `[start, start + dur)`, those of the spans inside it included (an op
//! inside a transform counts for both, as a flame graph's frames do), each span name once per
//! sample (a span nested in one of its own name counts once).

use std::collections::HashMap;
use std::path::Path;

use mlprof_format::func::Func;
use mlprof_format::record::IttSpan;
use mlprof_format::runfile::Frame;
use mlprof_format::sample::CpuSample;

/// A sample and the span names (string ids) that hold it so far.
struct Pending {
    time_ns: u64,
    stack: u32,
    spans: Vec<u64>,
}

/// `(span name ids, stack id)` of every sample (no span: outside any).
pub(super) fn attribute(path: &Path, samples: Vec<CpuSample>) -> Result<Vec<(Vec<u64>, u32)>, String> {
    let mut by_thread: HashMap<(u32, u32), Vec<Pending>> = HashMap::new();
    for s in samples {
        by_thread.entry((s.pid, s.tid)).or_default().push(Pending {
            time_ns: s.time_ns,
            stack: s.stack,
            spans: Vec::new(),
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
    Ok(by_thread.into_values().flatten().map(|p| (p.spans, p.stack)).collect())
}

/// Gives `span` the samples of its thread inside it (`pending` sorted by time).
fn take(pending: &mut [Pending], span: &IttSpan) {
    let end = span.start.saturating_add(span.dur);
    let first = pending.partition_point(|p| p.time_ns < span.start);
    for sample in pending.iter_mut().skip(first).take_while(|p| p.time_ns < end) {
        if !sample.spans.contains(&span.name) {
            sample.spans.push(span.name);
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
    /// every sample inside it, the op those inside it, once however deep it nests.
    #[test]
    fn a_span_holds_the_samples_of_the_spans_inside_it() {
        let mut pending: Vec<Pending> = [5, 15, 25, 35, 45]
            .iter()
            .map(|&t| Pending { time_ns: t, stack: t as u32, spans: Vec::new() })
            .collect();
        // Written as they end: innermost first.
        for s in [span(22, 5, 2), span(20, 10, 2), span(10, 30, 1)] {
            take(&mut pending, &s);
        }
        let spans: Vec<Vec<u64>> = pending.iter().map(|p| p.spans.clone()).collect();
        // 5: before all; 15: fetch; 25: op (twice nested, once) and fetch; 35: fetch; 45: after
        // (end is exclusive).
        assert_eq!(spans, [vec![], vec![1], vec![2, 1], vec![1], vec![]]);
    }
}

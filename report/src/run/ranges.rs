//! Capture ranges (format 1.9, [`mlprof_format::range`]): the run's edges paired into ranges.
//! A run without a capture frame (no capture option, or an older file) is one range, the
//! whole run.

use std::collections::BTreeMap;

use mlprof_format::gpu::{ACTIVITY_LINK, GpuActivity};
use mlprof_format::range::{CaptureInfo, RangeEdge};
use mlprof_format::ring::{CaptureSource, Trigger};
use mlprof_format::sample::CpuSample;

use super::RunMeta;

/// One range, times relative to the run's start.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub(crate) struct Range {
    /// 1, 2, … (as the gate counted them).
    pub(crate) number: u32,
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
    pub(crate) duration_ns: u64,
    /// The trigger's name (`cudaProfilerStart`, `__itt_resume`, `delay`, …; `start of run`
    /// for a run without capture, `unknown` for an edge that was lost).
    pub(crate) opened_by: String,
    pub(crate) closed_by: String,
    /// The processes whose calls made the edges (0: the collector, or none).
    pub(crate) opened_pid: u32,
    pub(crate) closed_pid: u32,
}

/// The run's capture: how, and the ranges.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub(crate) struct Capture {
    /// `None` without a capture option (the one range is the whole run); else the source's
    /// name (`cudaProfilerApi`, `itt`, `time`, `steps`).
    pub(crate) source: Option<&'static str>,
    /// Ranges allowed (0: no limit).
    pub(crate) limit: u32,
    pub(crate) ranges: Vec<Range>,
    /// Time inside the ranges, and the rest of the run.
    pub(crate) recorded_ns: u64,
    pub(crate) outside_ns: u64,
}

impl RunMeta {
    /// The run's ranges, for a run that spans `run_start..run_end` (CLOCK_MONOTONIC ns).
    pub(crate) fn capture(&self, run_start: u64, run_end: u64) -> Capture {
        let run_ns = run_end.saturating_sub(run_start);
        let Some(info) = &self.capture else {
            let whole = Range {
                number: 1,
                start_ns: 0,
                end_ns: run_ns,
                duration_ns: run_ns,
                opened_by: "start of run".into(),
                closed_by: Trigger::RunEnd.name().into(),
                opened_pid: 0,
                closed_pid: 0,
            };
            return Capture {
                source: None,
                limit: 0,
                ranges: vec![whole],
                recorded_ns: run_ns,
                outside_ns: 0,
            };
        };
        let ranges = pair(&self.range_edges, run_start, run_end);
        let recorded_ns = ranges.iter().map(|r| r.duration_ns).sum::<u64>().min(run_ns);
        Capture {
            source: Some(CaptureSource::from_u32(info.source).map_or("unknown", CaptureSource::name)),
            limit: info.limit,
            ranges,
            recorded_ns,
            outside_ns: run_ns - recorded_ns,
        }
    }
}

/// The ranges as absolute intervals (CLOCK_MONOTONIC ns), for what the process does not gate
/// itself and the reports filter when they read it: GPU activities (CUPTI hands them over
/// late, buffered: a kernel launched inside a range may run and be flushed after its close)
/// and CPU samples (the collector's sampler). `None`: no capture option, everything is kept.
#[derive(Clone, Debug, Default)]
pub(crate) struct Window(Option<Vec<(u64, u64)>>);

impl Window {
    /// The window of a run that has `capture` and `edges` and spans `start..end`.
    pub(crate) fn new(capture: Option<&CaptureInfo>, edges: &[RangeEdge], start: u64, end: u64) -> Window {
        if capture.is_none() {
            return Window(None);
        }
        let end = edges.iter().map(|e| e.time_ns).fold(end, u64::max);
        Window(Some(pair(edges, start, end).iter().map(|r| (start + r.start_ns, start + r.end_ns)).collect()))
    }

    /// Whether something from `start` lasting `dur` ns falls in a range (an instant: `dur` 0).
    pub(crate) fn overlaps(&self, start: u64, dur: u64) -> bool {
        let Some(ranges) = &self.0 else { return true };
        let end = start.saturating_add(dur);
        ranges.iter().any(|&(a, b)| start < b.max(a + 1) && end >= a)
    }

    /// Keeps the GPU activities that ran, at least partly, inside a range (and every link of a
    /// call to its work: the call decides, by being recorded or not).
    pub(crate) fn keep_gpu(&self, records: &mut Vec<GpuActivity>) {
        if self.0.is_some() {
            records.retain(|r| r.what == ACTIVITY_LINK || self.overlaps(r.start, r.dur));
        }
    }

    /// The parts of `from..to` inside the ranges (all of it without a capture option).
    pub(crate) fn spans(&self, from: u64, to: u64) -> Vec<(u64, u64)> {
        match &self.0 {
            None => vec![(from, to)],
            Some(ranges) => {
                ranges.iter().map(|&(a, b)| (a.max(from), b.min(to))).filter(|(a, b)| a < b).collect()
            }
        }
    }

    /// Keeps the CPU samples taken inside a range.
    pub(crate) fn keep_samples(&self, samples: &mut Vec<CpuSample>) {
        if self.0.is_some() {
            samples.retain(|s| self.overlaps(s.time_ns, 0));
        }
    }
}

impl RunMeta {
    /// The run's [`Window`].
    pub(crate) fn window(&self) -> Window {
        let start = self.info.start_mono_ns;
        Window::new(
            self.capture.as_ref(),
            &self.range_edges,
            start,
            self.end.as_ref().map_or(start, |e| e.end_ns),
        )
    }
}

/// Edges paired by range number: an open edge with no close ends with the run, a close with
/// no open (its edge lost) starts with it.
fn pair(edges: &[RangeEdge], run_start: u64, run_end: u64) -> Vec<Range> {
    let mut by_number: BTreeMap<u32, (Option<&RangeEdge>, Option<&RangeEdge>)> = BTreeMap::new();
    for edge in edges {
        let slot = by_number.entry(edge.range).or_default();
        if edge.opened {
            slot.0.get_or_insert(edge);
        } else {
            slot.1.get_or_insert(edge);
        }
    }
    let name = |edge: Option<&RangeEdge>, missing: Trigger| {
        edge.map_or(missing.name(), |e| Trigger::from_u32(e.trigger).name()).to_string()
    };
    by_number
        .into_iter()
        .map(|(number, (open, close))| {
            let start = open.map_or(run_start, |e| e.time_ns).clamp(run_start, run_end);
            let end = close.map_or(run_end, |e| e.time_ns).clamp(start, run_end.max(start));
            Range {
                number,
                start_ns: start - run_start,
                end_ns: end - run_start,
                duration_ns: end - start,
                opened_by: name(open, Trigger::Unknown),
                closed_by: name(close, Trigger::RunEnd),
                opened_pid: open.map_or(0, |e| e.pid),
                closed_pid: close.map_or(0, |e| e.pid),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(range: u32, opened: bool, time_ns: u64, trigger: Trigger) -> RangeEdge {
        RangeEdge { range, opened, time_ns, pid: 7, tid: 7, trigger: trigger as u32 }
    }

    #[test]
    fn edges_pair_by_number_and_open_ranges_end_with_the_run() {
        let edges = [
            edge(2, true, 1_500, Trigger::CudaProfilerStart),
            edge(1, true, 1_100, Trigger::CudaProfilerStart),
            edge(1, false, 1_200, Trigger::CuProfilerStop),
        ];
        let ranges = pair(&edges, 1_000, 2_000);
        assert_eq!(ranges.len(), 2);
        assert_eq!((ranges[0].start_ns, ranges[0].end_ns, ranges[0].duration_ns), (100, 200, 100));
        assert_eq!(ranges[0].closed_by, "cuProfilerStop");
        assert_eq!((ranges[1].start_ns, ranges[1].end_ns), (500, 1_000));
        assert_eq!(ranges[1].closed_by, "end of run");
        let mut meta = RunMeta { capture: Some(Default::default()), ..RunMeta::default() };
        meta.range_edges = edges.to_vec();
        let capture = meta.capture(1_000, 2_000);
        assert_eq!((capture.recorded_ns, capture.outside_ns), (600, 400));
    }

    #[test]
    fn the_window_keeps_what_falls_in_a_range() {
        let edges = [edge(1, true, 1_100, Trigger::Delay), edge(1, false, 1_200, Trigger::Duration)];
        let window = Window::new(Some(&CaptureInfo::default()), &edges, 1_000, 2_000);
        assert!(window.overlaps(1_150, 0) && window.overlaps(1_050, 60) && window.overlaps(1_199, 500));
        assert!(!window.overlaps(1_050, 10) && !window.overlaps(1_200, 0) && !window.overlaps(1_900, 5));
        let mut samples: Vec<CpuSample> = [1_099, 1_100, 1_150, 1_250]
            .map(|time_ns| CpuSample { time_ns, ..CpuSample::default() })
            .to_vec();
        window.keep_samples(&mut samples);
        assert_eq!(samples.iter().map(|s| s.time_ns).collect::<Vec<_>>(), [1_100, 1_150]);
        let gpu = |start, what| GpuActivity { start, dur: 10, what, ..GpuActivity::default() };
        let mut records = vec![gpu(1_000, 0), gpu(1_195, 0), gpu(1_500, ACTIVITY_LINK), gpu(1_500, 0)];
        window.keep_gpu(&mut records);
        assert_eq!(records.iter().map(|r| r.start).collect::<Vec<_>>(), [1_195, 1_500]);
        assert_eq!(window.spans(1_150, 2_000), [(1_150, 1_200)]);
        // No capture: everything.
        assert!(Window::new(None, &edges, 1_000, 2_000).overlaps(1_900, 0));
        assert_eq!(Window::new(None, &edges, 1_000, 2_000).spans(1_000, 2_000), [(1_000, 2_000)]);
    }

    #[test]
    fn a_run_without_capture_is_one_range() {
        let capture = RunMeta::default().capture(10, 110);
        assert_eq!(capture.source, None);
        assert_eq!(capture.ranges.len(), 1);
        assert_eq!((capture.recorded_ns, capture.outside_ns), (100, 0));
    }
}

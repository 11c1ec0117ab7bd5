//! Capture ranges: recording only between two edges (`--capture-range`, `--delay`,
//! `--duration`, `--steps`, `mlprof.start()`/`stop()`).
//!
//! The gate is one word of the ring header, [`RingHeader::capture`], which every hook loads
//! before it claims a lane or reads the clock: bit 0 ([`CAPTURE_PAUSED`]) set means "pass
//! through"; the bits above count the ranges opened so far. Zero (what an older collector
//! leaves in these once-reserved bytes) records, as before. All processes of a tree map the
//! same header, so a fork child or a spawned worker follows the range at its next call.
//!
//! Whoever flips the gate, with one compare-and-swap, records the edge: a hook
//! (`cudaProfilerStart`, `__itt_resume`, …) as a [`KIND_CAPTURE_EDGE`] control record on its
//! lane, the collector (`--delay`, `--duration`) straight into the run file. A trigger flips
//! only the gate of the source the collector was told ([`RingHeader::capture_source`]); with
//! no source every trigger changes nothing. Opening an open gate, closing a closed one and
//! opening more ranges than [`RingHeader::capture_limit`] allows change nothing either.

use core::sync::atomic::Ordering;

use super::RingHeader;

/// [`RingHeader::capture`] bit: paused, hooks pass through.
pub const CAPTURE_PAUSED: u32 = 1;
/// [`RingHeader::capture`]: one range counted (the count is the word shifted right by one).
const ONE_RANGE: u32 = 2;

/// Ring control kind: a range edge a hook made: `start` = time (ring clock), `arg` = the
/// range's number (1, 2, …), `fd` = 1 for an open, 0 for a close, `extra` = the [`Trigger`].
/// Older collectors skip it like any unknown control kind (and see no ranges).
pub const KIND_CAPTURE_EDGE: u16 = 0x8010;

/// What may open and close ranges (`--capture-range` and the options that imply one).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureSource {
    /// No capture option: the whole run is one range, and no trigger changes anything.
    None = 0,
    /// `--capture-range=cudaProfilerApi`: `cudaProfilerStart`/`Stop`, `cuProfilerStart`/`Stop`.
    CudaProfilerApi = 1,
    /// `--capture-range=itt`: `__itt_resume`, `__itt_pause`/`__itt_detach`, and the wheel's
    /// `mlprof.start()`/`stop()`.
    Itt = 2,
    /// `--delay`/`--duration`: the collector's timer.
    Time = 3,
    /// `--steps A-B`: the `--torch` hook, counting `optimizer.step()` returns.
    Steps = 4,
}

impl CaptureSource {
    /// The source numbered `value`, if this build knows it.
    pub fn from_u32(value: u32) -> Option<CaptureSource> {
        use CaptureSource::*;
        [None, CudaProfilerApi, Itt, Time, Steps].into_iter().find(|s| *s as u32 == value)
    }

    /// The name the options and reports use.
    pub fn name(self) -> &'static str {
        match self {
            CaptureSource::None => "none",
            CaptureSource::CudaProfilerApi => "cudaProfilerApi",
            CaptureSource::Itt => "itt",
            CaptureSource::Time => "time",
            CaptureSource::Steps => "steps",
        }
    }
}

/// What opened or closed a range (kept with each edge; numbers are only ever added).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Not known to this build.
    Unknown = 0,
    /// `cudaProfilerStart` (runtime).
    CudaProfilerStart = 1,
    /// `cudaProfilerStop` (runtime).
    CudaProfilerStop = 2,
    /// `cuProfilerStart` (driver).
    CuProfilerStart = 3,
    /// `cuProfilerStop` (driver).
    CuProfilerStop = 4,
    /// `__itt_resume`.
    IttResume = 5,
    /// `__itt_pause`.
    IttPause = 6,
    /// `__itt_detach`.
    IttDetach = 7,
    /// The wheel's `mlprof.start()` (or `capture()` entered).
    ApiStart = 8,
    /// The wheel's `mlprof.stop()` (or `capture()` left).
    ApiStop = 9,
    /// `--delay` ran out (or the run started, with no delay).
    Delay = 10,
    /// `--duration` ran out.
    Duration = 11,
    /// `--steps`: the step before the first (or the job's start) returned.
    StepStart = 12,
    /// `--steps`: the last step's `optimizer.step()` returned.
    StepEnd = 13,
    /// The run ended with the range open (added by the reader, never recorded).
    RunEnd = 14,
}

impl Trigger {
    const ALL: [Trigger; 15] = [
        Trigger::Unknown,
        Trigger::CudaProfilerStart,
        Trigger::CudaProfilerStop,
        Trigger::CuProfilerStart,
        Trigger::CuProfilerStop,
        Trigger::IttResume,
        Trigger::IttPause,
        Trigger::IttDetach,
        Trigger::ApiStart,
        Trigger::ApiStop,
        Trigger::Delay,
        Trigger::Duration,
        Trigger::StepStart,
        Trigger::StepEnd,
        Trigger::RunEnd,
    ];

    /// The trigger numbered `value` ([`Trigger::Unknown`] for a number this build does not know).
    pub fn from_u32(value: u32) -> Trigger {
        Trigger::ALL.into_iter().find(|t| *t as u32 == value).unwrap_or(Trigger::Unknown)
    }

    /// The name reports print.
    pub fn name(self) -> &'static str {
        match self {
            Trigger::Unknown => "unknown",
            Trigger::CudaProfilerStart => "cudaProfilerStart",
            Trigger::CudaProfilerStop => "cudaProfilerStop",
            Trigger::CuProfilerStart => "cuProfilerStart",
            Trigger::CuProfilerStop => "cuProfilerStop",
            Trigger::IttResume => "__itt_resume",
            Trigger::IttPause => "__itt_pause",
            Trigger::IttDetach => "__itt_detach",
            Trigger::ApiStart => "mlprof.start",
            Trigger::ApiStop => "mlprof.stop",
            Trigger::Delay => "delay",
            Trigger::Duration => "duration",
            Trigger::StepStart => "steps",
            Trigger::StepEnd => "steps",
            Trigger::RunEnd => "end of run",
        }
    }

    /// The source whose gate this trigger flips.
    pub fn source(self) -> CaptureSource {
        use Trigger::*;
        match self {
            CudaProfilerStart | CudaProfilerStop | CuProfilerStart | CuProfilerStop => {
                CaptureSource::CudaProfilerApi
            }
            IttResume | IttPause | IttDetach | ApiStart | ApiStop => CaptureSource::Itt,
            Delay | Duration => CaptureSource::Time,
            StepStart | StepEnd => CaptureSource::Steps,
            Unknown | RunEnd => CaptureSource::None,
        }
    }

    /// Whether it opens a range (else it closes one).
    pub fn opens(self) -> bool {
        use Trigger::*;
        matches!(self, CudaProfilerStart | CuProfilerStart | IttResume | ApiStart | Delay | StepStart)
    }
}

/// How a run captures: the source, the number of ranges allowed, and whether it starts paused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapturePlan {
    /// What opens and closes ranges.
    pub source: CaptureSource,
    /// Ranges that may be opened (0: no limit).
    pub limit: u32,
    /// The job starts outside a range (false: a range opens with the run).
    pub paused: bool,
}

impl CapturePlan {
    /// No capture option: the whole run.
    pub const WHOLE_RUN: CapturePlan = CapturePlan { source: CaptureSource::None, limit: 0, paused: false };

    /// The initial [`RingHeader::capture`] word: paused with no range yet, or range 1 open.
    pub fn initial_word(self) -> u32 {
        match (self.source, self.paused) {
            (CaptureSource::None, _) => 0,
            (_, true) => CAPTURE_PAUSED,
            (_, false) => ONE_RANGE,
        }
    }
}

/// A change of the gate: the range's number and whether it opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flipped {
    /// The range (1, 2, …).
    pub range: u32,
    /// Opened (else closed).
    pub opened: bool,
}

impl RingHeader {
    /// Whether hooks record now (one relaxed load: a call racing an edge on another thread
    /// falls on either side of it).
    #[inline(always)]
    pub fn capturing(&self) -> bool {
        self.capture.load(Ordering::Relaxed) & CAPTURE_PAUSED == 0
    }

    /// Sets the capture plan; before the segment is visible to producers.
    pub fn set_capture(&self, plan: CapturePlan) {
        self.capture_source.store(plan.source as u32, Ordering::Relaxed);
        self.capture_limit.store(plan.limit, Ordering::Relaxed);
        self.capture.store(plan.initial_word(), Ordering::Release);
    }

    /// Flips the gate for `trigger` when it may: its source is the run's, the gate is the
    /// other way, and (opening) the limit allows another range. `None` when nothing changed.
    pub fn flip_capture(&self, trigger: Trigger) -> Option<Flipped> {
        let source = self.capture_source.load(Ordering::Relaxed);
        if source == CaptureSource::None as u32 || trigger.source() as u32 != source {
            return None;
        }
        let limit = self.capture_limit.load(Ordering::Relaxed);
        let opens = trigger.opens();
        let mut word = self.capture.load(Ordering::Acquire);
        loop {
            let paused = word & CAPTURE_PAUSED != 0;
            let count = word >> 1;
            let (new, range) = if opens {
                if !paused || (limit != 0 && count >= limit) {
                    return None;
                }
                ((count + 1) << 1, count + 1)
            } else {
                if paused {
                    return None;
                }
                (word | CAPTURE_PAUSED, count)
            };
            match self.capture.compare_exchange_weak(word, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(Flipped { range, opened: opens }),
                Err(now) => word = now,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::{RingGeometry, RingView};

    fn with_header(f: impl FnOnce(&RingHeader)) {
        let geometry = RingGeometry { lane_count: 1, lane_capacity: 64 };
        let mut memory = vec![0u64; geometry.total_bytes() as usize / 8];
        // Safety: zeroed, 8-aligned memory of the geometry's size, used only here.
        let view = unsafe {
            RingView::initialize(memory.as_mut_ptr() as *mut u8, geometry, 2, 0, 0, 1);
            RingView::new(memory.as_mut_ptr() as *mut u8, geometry)
        };
        f(view.header());
    }

    #[test]
    fn zero_records_and_no_source_ignores_every_trigger() {
        with_header(|h| {
            assert!(h.capturing());
            assert_eq!(h.flip_capture(Trigger::CudaProfilerStop), None);
            assert_eq!(h.flip_capture(Trigger::IttPause), None);
            assert!(h.capturing());
        });
    }

    #[test]
    fn stop_allows_one_range() {
        with_header(|h| {
            h.set_capture(CapturePlan { source: CaptureSource::CudaProfilerApi, limit: 1, paused: true });
            assert!(!h.capturing());
            assert_eq!(h.flip_capture(Trigger::CudaProfilerStop), None);
            assert_eq!(h.flip_capture(Trigger::IttResume), None, "another source's trigger");
            assert_eq!(h.flip_capture(Trigger::CudaProfilerStart), Some(Flipped { range: 1, opened: true }));
            assert_eq!(h.flip_capture(Trigger::CuProfilerStart), None, "already open");
            assert!(h.capturing());
            assert_eq!(h.flip_capture(Trigger::CuProfilerStop), Some(Flipped { range: 1, opened: false }));
            assert_eq!(h.flip_capture(Trigger::CudaProfilerStart), None, "past the last range");
            assert!(!h.capturing());
        });
    }

    #[test]
    fn repeat_counts_ranges_up_to_its_limit() {
        with_header(|h| {
            h.set_capture(CapturePlan { source: CaptureSource::Itt, limit: 2, paused: true });
            for range in 1..=2 {
                assert_eq!(h.flip_capture(Trigger::IttResume), Some(Flipped { range, opened: true }));
                assert_eq!(h.flip_capture(Trigger::ApiStop), Some(Flipped { range, opened: false }));
            }
            assert_eq!(h.flip_capture(Trigger::ApiStart), None);
            h.set_capture(CapturePlan { source: CaptureSource::Itt, limit: 0, paused: true });
            for range in 1..=100 {
                assert_eq!(h.flip_capture(Trigger::ApiStart), Some(Flipped { range, opened: true }));
                assert_eq!(h.flip_capture(Trigger::IttDetach), Some(Flipped { range, opened: false }));
            }
        });
    }

    #[test]
    fn a_plan_that_starts_open_has_range_one_open() {
        with_header(|h| {
            h.set_capture(CapturePlan { source: CaptureSource::Time, limit: 1, paused: false });
            assert!(h.capturing());
            assert_eq!(h.flip_capture(Trigger::Duration), Some(Flipped { range: 1, opened: false }));
            assert_eq!(h.flip_capture(Trigger::Delay), None);
        });
    }

    #[test]
    fn triggers_round_trip_their_numbers() {
        for t in Trigger::ALL {
            assert_eq!(Trigger::from_u32(t as u32), t);
        }
        assert_eq!(Trigger::from_u32(999), Trigger::Unknown);
        assert_eq!(CaptureSource::from_u32(2), Some(CaptureSource::Itt));
        assert_eq!(CaptureSource::from_u32(99), None);
    }
}

//! Capture ranges on the collector's side: the options (`--capture-range`,
//! `--capture-range-end`, `--delay`, `--duration`, `--steps`) checked and turned into the ring's
//! [`CapturePlan`] and the run file's [`CaptureInfo`], and the `--delay`/`--duration` timer,
//! which flips the gate itself and writes its edges straight into the run file. Edges the hooks
//! make come through the ring (`drain::step`).

use std::io;
use std::time::{Duration, Instant};

use mlprof_filewrite::BackgroundFile;
use mlprof_format::range::{CaptureInfo, RangeEdge};
use mlprof_format::ring::{CapturePlan, CaptureSource, RingHeader, Trigger};
use mlprof_format::runfile::RunWriter;

use crate::cli::Args;
use crate::timebase;

/// The run's capture: what the ring and the run file are told, and the timer's deadlines.
pub(crate) struct Capture {
    pub(crate) plan: CapturePlan,
    pub(crate) info: CaptureInfo,
    /// `--delay` and `--duration` (from the delay's end), until [`Capture::arm`].
    window: Option<(Duration, Option<Duration>)>,
    /// `--delay`: when the timer opens the range.
    open_at: Option<Instant>,
    /// `--duration`: when the timer closes it.
    close_at: Option<Instant>,
}

/// `--capture-range-end`: `stop` (1 range), `repeat` (no limit) or `repeat:N` (N ranges).
pub(crate) fn parse_range_end(value: &str) -> Result<u32, String> {
    match value {
        "stop" => Ok(1),
        "repeat" => Ok(0),
        _ => match value.strip_prefix("repeat:").map(str::parse::<u32>) {
            Some(Ok(n)) if n >= 1 => Ok(n),
            _ => Err(format!("'{value}': expected stop, repeat or repeat:N with N ≥ 1")),
        },
    }
}

/// `--steps A-B`: 1 ≤ A ≤ B.
pub(crate) fn parse_steps(value: &str) -> Result<(u32, u32), String> {
    let bad = || format!("'{value}': expected A-B, two step numbers with 1 ≤ A ≤ B (e.g. 10-20)");
    let (a, b) = value.split_once('-').ok_or_else(bad)?;
    let (a, b) = (a.trim().parse::<u32>().map_err(|_| bad())?, b.trim().parse::<u32>().map_err(|_| bad())?);
    if a == 0 || a > b {
        return Err(bad());
    }
    Ok((a, b))
}

/// `--delay`/`--duration`: seconds, finite, not negative.
pub(crate) fn parse_seconds(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(s) if s.is_finite() && s >= 0.0 => Ok(s),
        _ => Err(format!("'{value}': expected a number of seconds ≥ 0 (e.g. 30 or 2.5)")),
    }
}

impl Capture {
    /// The capture the options ask for, or why they do not fit together.
    pub(crate) fn from_args(args: &Args, torch: bool, launching: bool) -> Result<Capture, String> {
        let timed = args.delay.is_some() || args.duration.is_some();
        let sources = [args.capture_range.is_some(), timed, args.steps.is_some()];
        if sources.iter().filter(|s| **s).count() > 1 {
            return Err(
                "--capture-range, --delay/--duration and --steps each say when to record: use one".into()
            );
        }
        if args.capture_range_end.is_some() && args.capture_range.is_none() {
            return Err("--capture-range-end needs --capture-range=cudaProfilerApi|itt".into());
        }
        let limit = args.capture_range_end.unwrap_or(1);
        let mut capture = Capture {
            plan: CapturePlan::WHOLE_RUN,
            info: CaptureInfo::default(),
            window: None,
            open_at: None,
            close_at: None,
        };
        if let Some(source) = args.capture_range {
            capture.plan = CapturePlan { source, limit, paused: true };
        } else if timed {
            let (delay, duration) = (args.delay.unwrap_or(0.0), args.duration);
            if duration == Some(0.0) {
                return Err("--duration must be more than 0 seconds".into());
            }
            capture.plan = CapturePlan { source: CaptureSource::Time, limit: 1, paused: delay > 0.0 };
            capture.window = Some((Duration::from_secs_f64(delay), duration.map(Duration::from_secs_f64)));
            capture.info.delay_ns = (delay * 1e9) as u64;
            capture.info.duration_ns = duration.map_or(0, |d| (d * 1e9) as u64);
        } else if let Some((first, last)) = args.steps {
            if !torch || !launching {
                return Err("--steps counts optimizer.step() calls through the --torch hook: add --torch (launcher mode)".into());
            }
            capture.plan = CapturePlan { source: CaptureSource::Steps, limit: 1, paused: first > 1 };
            capture.info.steps = (first, last);
        }
        capture.info.source = capture.plan.source as u32;
        capture.info.limit = capture.plan.limit;
        capture.info.paused = capture.plan.paused;
        Ok(capture)
    }

    /// Whether the run captures at all (else it is one range, the whole run).
    pub(crate) fn active(&self) -> bool {
        self.plan.source != CaptureSource::None
    }

    /// Writes the run's capture frame, and range 1's opening edge when the job starts inside
    /// it (`--duration` without delay, `--steps 1-B`).
    pub(crate) fn write_start(
        &self,
        writer: &mut RunWriter<BackgroundFile>,
        start_ns: u64,
    ) -> io::Result<()> {
        if !self.active() {
            return Ok(());
        }
        writer.write_capture(&self.info)?;
        if !self.plan.paused {
            let trigger =
                if self.plan.source == CaptureSource::Steps { Trigger::StepStart } else { Trigger::Delay };
            writer.write_range_edge(&collector_edge(1, true, start_ns, trigger))?;
        }
        Ok(())
    }

    /// Starts the `--delay`/`--duration` timer: when the command is launched, or when an
    /// attached collector starts serving.
    pub(crate) fn arm(&mut self) {
        if let Some((delay, duration)) = self.window.take() {
            let now = Instant::now();
            self.open_at = (!delay.is_zero()).then(|| now + delay);
            self.close_at = duration.map(|d| now + delay + d);
        }
    }

    /// The timer: flips the gate when `--delay` or `--duration` ran out, and writes the edge.
    pub(crate) fn tick(
        &mut self,
        header: &RingHeader,
        writer: &mut RunWriter<BackgroundFile>,
    ) -> io::Result<()> {
        let now = Instant::now();
        for (deadline, trigger) in
            [(&mut self.open_at, Trigger::Delay), (&mut self.close_at, Trigger::Duration)]
        {
            if deadline.is_some_and(|at| now >= at) {
                *deadline = None;
                let time_ns = timebase::monotonic_ns();
                if let Some(flipped) = header.flip_capture(trigger) {
                    writer.write_range_edge(&collector_edge(
                        flipped.range,
                        flipped.opened,
                        time_ns,
                        trigger,
                    ))?;
                }
            }
        }
        Ok(())
    }

    /// How long the collector may sleep before the timer's next deadline.
    pub(crate) fn until_next(&self) -> Option<Duration> {
        let next = [self.open_at, self.close_at].into_iter().flatten().min()?;
        Some(next.saturating_duration_since(Instant::now()))
    }
}

fn collector_edge(range: u32, opened: bool, time_ns: u64, trigger: Trigger) -> RangeEdge {
    RangeEdge { range, opened, time_ns, pid: 0, tid: 0, trigger: trigger as u32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_end_values() {
        assert_eq!(parse_range_end("stop"), Ok(1));
        assert_eq!(parse_range_end("repeat"), Ok(0));
        assert_eq!(parse_range_end("repeat:3"), Ok(3));
        for bad in ["repeat:0", "repeat:", "again", "repeat:x", "stop:2"] {
            assert!(parse_range_end(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn steps_and_seconds() {
        assert_eq!(parse_steps("10-20"), Ok((10, 20)));
        assert_eq!(parse_steps("3-3"), Ok((3, 3)));
        for bad in ["0-2", "5-4", "7", "a-b", "-3"] {
            assert!(parse_steps(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_seconds("2.5"), Ok(2.5));
        for bad in ["-1", "nan", "inf", "soon"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }
}

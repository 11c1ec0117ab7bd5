//! `mlprof diff A.bin B.bin`: two runs side by side — per function, file, span name (ops,
//! phases, DataLoader spans, transforms) and rank: count, total time and bytes in A and B, the
//! change and the ratio, biggest absolute time change first; the data-pipeline wait share and
//! the energy totals of both.
//!
//! A name present in one run only has zeros on the other side. Ranks are keyed by rank when the
//! runs carry rank metadata, else by the main process's index in start order (`0`, `1`, …): pids
//! differ from run to run, the order of the mains does not. [`Diff::compute`] returns plain
//! rows; [`json`] and [`text`] render them.

pub mod json;
pub mod text;

use std::collections::BTreeMap;
use std::path::Path;

use mlprof_format::func::{Api, Func};

use crate::activity::power::{self, PowerSeries};
use crate::activity::{Activity, MainActivity};
use crate::energy::{EnergyReport, EnergyRun};
use crate::summary::Summary;

/// One side of a row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Side {
    pub(crate) count: u64,
    pub(crate) total_ns: u64,
    pub(crate) bytes: u64,
}

/// One name in both runs.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Row {
    pub(crate) name: String,
    pub(crate) a: Side,
    pub(crate) b: Side,
}

impl Row {
    /// B − A, ns.
    pub(crate) fn delta_ns(&self) -> i128 {
        self.b.total_ns as i128 - self.a.total_ns as i128
    }

    pub(crate) fn delta_count(&self) -> i128 {
        self.b.count as i128 - self.a.count as i128
    }

    /// B / A of the total time; `None` when A is 0.
    pub(crate) fn ratio(&self) -> Option<f64> {
        (self.a.total_ns > 0).then(|| self.b.total_ns as f64 / self.a.total_ns as f64)
    }

    pub(crate) fn changed(&self) -> bool {
        self.a != self.b
    }
}

/// A main process (rank) of both runs: its row, and its wall-time breakdowns.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RankRow {
    pub(crate) row: Row,
    pub(crate) a: Option<MainActivity>,
    pub(crate) b: Option<MainActivity>,
}

/// The data-pipeline figures of one run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PipelineSide {
    pub(crate) batches: u64,
    pub(crate) wait_total_ns: u64,
    pub(crate) wall_ns: u64,
    pub(crate) wait_share: f64,
}

/// The energy figures of one run (`None` in [`RunSide::energy`] when nothing was measured).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct EnergySide {
    pub(crate) energy_j: f64,
    pub(crate) uncertainty_j: f64,
    pub(crate) duration_s: f64,
    /// Per device in the run: (name, energy J).
    pub(crate) devices: Vec<(String, f64)>,
}

/// What the diff shows of each run as a whole.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RunSide {
    /// The run file as given.
    pub(crate) run: String,
    pub(crate) command: String,
    pub(crate) duration_ns: u64,
    pub(crate) events: u64,
    pub(crate) dropped: u64,
    pub(crate) pipeline: Option<PipelineSide>,
    pub(crate) energy: Option<EnergySide>,
}

/// Two runs compared.
#[derive(Clone, Debug, PartialEq)]
pub struct Diff {
    pub(crate) a: RunSide,
    pub(crate) b: RunSide,
    /// Each table biggest absolute time change first, then by name.
    pub(crate) calls: Vec<Row>,
    pub(crate) spans: Vec<Row>,
    pub(crate) files: Vec<Row>,
    /// Call sites (`--sites`) by `file:line function`; empty when neither run has sites.
    pub(crate) sites: Vec<Row>,
    pub(crate) ranks: Vec<RankRow>,
}

/// The figures of one run the diff is made from (computed once, also used by the HTML
/// report's comparison).
pub struct RunFigures {
    pub(crate) run: String,
    pub(crate) summary: Summary,
    pub(crate) activity: Activity,
    pub(crate) energy: EnergyReport,
    /// Power per device on the activity's time axis.
    pub(crate) power: Vec<PowerSeries>,
    /// Sampled stacks per span (`--sample`; empty without).
    pub(crate) hotspots: crate::hotspots::Hotspots,
}

impl RunFigures {
    /// Three passes over the run's events (summary, activity, energy spans), two more over its
    /// samples when it has some.
    pub fn load(path: &Path) -> Result<RunFigures, String> {
        let summary = Summary::compute(path)?;
        let activity = Activity::compute(path)?;
        let energy_run = EnergyRun::load(path)?;
        let energy = EnergyReport::compute(&energy_run);
        let power = power::timeline(&energy_run);
        let hotspots = crate::hotspots::compute(path, &crate::hotspots::Options { span: None, top: 10 })?;
        Ok(RunFigures { run: path.display().to_string(), summary, activity, energy, power, hotspots })
    }

    fn side(&self) -> RunSide {
        let s = &self.summary;
        let e = &self.energy;
        let measured = e.devices.iter().any(|d| d.in_run && d.energy_j.is_some());
        RunSide {
            run: self.run.clone(),
            command: s.command_line.clone(),
            duration_ns: s.duration_ns,
            events: s.events,
            dropped: s.dropped,
            pipeline: s.data_pipeline.as_ref().map(|p| PipelineSide {
                batches: p.batches,
                wait_total_ns: p.wait_total_ns,
                wall_ns: p.wall_ns,
                wait_share: p.wait_share(),
            }),
            energy: measured.then(|| EnergySide {
                energy_j: e.measured_j,
                uncertainty_j: e.measured_uncertainty_j,
                duration_s: e.duration_s(),
                devices: e
                    .devices
                    .iter()
                    .filter(|d| d.in_run)
                    .filter_map(|d| Some((d.name.clone(), d.energy_j?)))
                    .collect(),
            }),
        }
    }
}

/// Name → (A, B).
type Sides = BTreeMap<String, (Side, Side)>;

fn add(table: &mut Sides, name: String, b: bool, side: Side) {
    let entry = table.entry(name).or_default();
    let at = if b { &mut entry.1 } else { &mut entry.0 };
    at.count += side.count;
    at.total_ns += side.total_ns;
    at.bytes += side.bytes;
}

fn rows(table: Sides) -> Vec<Row> {
    let mut rows: Vec<Row> = table.into_iter().map(|(name, (a, b))| Row { name, a, b }).collect();
    rows.sort_by(|x, y| y.delta_ns().abs().cmp(&x.delta_ns().abs()).then_with(|| x.name.cmp(&y.name)));
    rows
}

/// The key of a main process in the ranks table: its rank, else its index in start order.
fn rank_key(index: usize, main: &MainActivity) -> String {
    match main.rank {
        Some(rank) => rank.to_string(),
        None => index.to_string(),
    }
}

impl Diff {
    pub fn compute(a: &RunFigures, b: &RunFigures) -> Diff {
        let (mut calls, mut spans, mut files, mut sites) =
            (Sides::new(), Sides::new(), Sides::new(), Sides::new());
        let mut ranks: BTreeMap<String, (Option<MainActivity>, Option<MainActivity>)> = BTreeMap::new();
        for (is_b, run) in [(false, a), (true, b)] {
            let s = &run.summary;
            // Calls only: ITT spans nest and have their own table.
            for (name, c) in &s.calls {
                if Func::from_name(name).is_none_or(|f| f.api() != Api::Itt) {
                    add(
                        &mut calls,
                        name.to_string(),
                        is_b,
                        Side { count: c.count, total_ns: c.total_ns, bytes: c.bytes },
                    );
                }
            }
            for span in &s.spans {
                add(
                    &mut spans,
                    span.name.clone(),
                    is_b,
                    Side { count: span.count, total_ns: span.total_ns, bytes: 0 },
                );
            }
            for f in &s.files {
                let side =
                    Side { count: f.calls, total_ns: f.total_ns, bytes: f.bytes_read + f.bytes_written };
                add(&mut files, f.path.clone(), is_b, side);
            }
            for site in &s.sites {
                let label = format!("{}:{} {}", site.file, site.line, site.function);
                let total = site.total();
                add(
                    &mut sites,
                    label,
                    is_b,
                    Side { count: total.count, total_ns: total.total_ns, bytes: total.bytes },
                );
            }
            for (index, main) in run.activity.mains.iter().enumerate() {
                let entry = ranks.entry(rank_key(index, main)).or_default();
                *(if is_b { &mut entry.1 } else { &mut entry.0 }) = Some(main.clone());
            }
        }
        let side = |m: &Option<MainActivity>| {
            m.as_ref().map_or(Side::default(), |m| Side {
                count: m.calls,
                total_ns: m.calls_ns,
                bytes: m.bytes,
            })
        };
        let mut ranks: Vec<RankRow> = ranks
            .into_iter()
            .map(|(name, (ma, mb))| RankRow { row: Row { name, a: side(&ma), b: side(&mb) }, a: ma, b: mb })
            .collect();
        // Ranks in numeric order: a run's ranks are few and their order means something.
        ranks.sort_by_key(|r| (r.row.name.parse::<u64>().unwrap_or(u64::MAX), r.row.name.clone()));
        Diff {
            a: a.side(),
            b: b.side(),
            calls: rows(calls),
            spans: rows(spans),
            files: rows(files),
            sites: rows(sites),
            ranks,
        }
    }
}

#[cfg(test)]
mod tests;

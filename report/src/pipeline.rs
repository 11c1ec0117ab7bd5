//! The ITT spans of a run — time per (domain, span name): PyTorch ops, training phases, user
//! ranges — and the data pipeline built from the `mlprof.data` spans that
//! `mlprof-collect --torch` records (README "PyTorch and the DataLoader"). [`Pipeline`]
//! collects while the summary streams the events; [`Pipeline::spans`] and
//! [`Pipeline::data_pipeline`] compute the plain results.

use std::collections::{BTreeMap, HashMap};

use mlprof_format::func::Func;
use mlprof_format::record::{Event, IttSpan};
use mlprof_format::string_id;

use crate::run::RunMeta;

/// The domain of the DataLoader spans.
pub(crate) const DATA_DOMAIN: &str = "mlprof.data";
pub(crate) const DATA: u64 = string_id(DATA_DOMAIN.as_bytes());
pub(crate) const WAIT: u64 = string_id(b"batch.wait");
const CONSUME: u64 = string_id(b"batch.consume");
pub(crate) const FETCH: u64 = string_id(b"batch.fetch");
const COLLATE: u64 = string_id(b"collate");
const OUT_OF_ORDER: u64 = string_id(b"batch.out_of_order");

/// One `mlprof.data` span.
#[derive(Clone, Copy)]
struct DataSpan {
    pid: u32,
    name: u64,
    start: u64,
    dur: u64,
    /// Batch id: loader serial << 48 | epoch << 32 | batch index.
    id: u64,
    /// The main process's pid (the DataLoader's owner).
    main: u64,
}

/// The trace flow id linking a batch's fetch (in a worker) to its wait (in the main
/// process): (main pid, batch id) mixed into 53 bits, exact as a JSON number.
pub(crate) fn flow_id(main_pid: u64, batch: u64) -> u64 {
    let mut x = batch ^ main_pid.rotate_left(40) ^ 0x9e37_79b9_7f4a_7c15;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) & ((1 << 53) - 1)
}

/// The ITT spans seen so far; fed one event at a time.
#[derive(Default)]
pub(crate) struct Pipeline {
    /// (domain id, name id) → (count, total ns).
    spans: HashMap<(u64, u64), (u64, u64)>,
    data: Vec<DataSpan>,
    out_of_order: u64,
}

/// Time in one (domain, span name).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SpanRow {
    pub(crate) domain: String,
    pub(crate) name: String,
    pub(crate) count: u64,
    pub(crate) total_ns: u64,
}

impl SpanRow {
    pub(crate) fn mean_ns(&self) -> u64 {
        self.total_ns / self.count.max(1)
    }
}

/// count, total, median, p90, p99 and max of a set of durations (percentiles by nearest rank).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Distribution {
    pub(crate) count: u64,
    pub(crate) total_ns: u64,
    pub(crate) median_ns: u64,
    pub(crate) p90_ns: u64,
    pub(crate) p99_ns: u64,
    pub(crate) max_ns: u64,
}

impl Distribution {
    pub(crate) fn of(mut values: Vec<u64>) -> Distribution {
        values.sort_unstable();
        let rank = |q: f64| -> u64 {
            if values.is_empty() {
                return 0;
            }
            let at = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
            values[at - 1]
        };
        Distribution {
            count: values.len() as u64,
            total_ns: values.iter().sum(),
            median_ns: rank(0.5),
            p90_ns: rank(0.9),
            p99_ns: rank(0.99),
            max_ns: values.last().copied().unwrap_or(0),
        }
    }
}

/// One transform class (`transform:<ClassName>` spans, one per sample).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TransformRow {
    /// The class name, without the `transform:` prefix.
    pub(crate) name: String,
    pub(crate) durations: Distribution,
}

/// A process that fetched batches (a DataLoader worker, or the main process itself).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WorkerRow {
    pub(crate) pid: u32,
    pub(crate) ppid: u32,
    pub(crate) main_pid: u64,
    pub(crate) batches: u64,
    /// Time in `batch.fetch`.
    pub(crate) busy_ns: u64,
}

/// A process that waited for batches.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MainRow {
    pub(crate) pid: u32,
    pub(crate) batches: u64,
    pub(crate) wait_ns: u64,
    /// From its first batch request to its last batch's consumption end.
    pub(crate) wall_ns: u64,
}

impl MainRow {
    pub(crate) fn wait_share(&self) -> f64 {
        share(self.wait_ns, self.wall_ns)
    }
}

/// One batch, keyed by (main pid, batch id); a part is `None` when its span was not seen.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct BatchRow {
    pub(crate) main_pid: u64,
    pub(crate) id: u64,
    pub(crate) wait_ns: Option<u64>,
    pub(crate) consume_ns: Option<u64>,
    pub(crate) fetch_ns: Option<u64>,
    pub(crate) collate_ns: Option<u64>,
    pub(crate) worker_pid: Option<u32>,
}

impl BatchRow {
    pub(crate) fn loader(&self) -> u64 {
        self.id >> 48
    }
    pub(crate) fn epoch(&self) -> u64 {
        (self.id >> 32) & 0xffff
    }
    pub(crate) fn batch(&self) -> u64 {
        self.id & 0xffff_ffff
    }
}

/// The data-pipeline section of the summary.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DataPipeline {
    /// Batches waited for (`batch.wait` spans).
    pub(crate) batches: u64,
    pub(crate) wait_total_ns: u64,
    /// Per main process from its first batch request to its last batch's consumption, summed.
    pub(crate) wall_ns: u64,
    pub(crate) out_of_order: u64,
    pub(crate) wait: Distribution,
    pub(crate) consume: Distribution,
    pub(crate) fetch: Distribution,
    pub(crate) collate: Distribution,
    pub(crate) transforms: Vec<TransformRow>,
    pub(crate) workers: Vec<WorkerRow>,
    pub(crate) mains: Vec<MainRow>,
    pub(crate) per_batch: Vec<BatchRow>,
}

impl DataPipeline {
    /// The share of training time spent waiting for data.
    pub(crate) fn wait_share(&self) -> f64 {
        share(self.wait_total_ns, self.wall_ns)
    }
}

fn share(part: u64, whole: u64) -> f64 {
    if whole > 0 { part as f64 / whole as f64 } else { 0.0 }
}

impl Pipeline {
    /// Takes one recorded event (only ITT tasks, frames and markers are kept).
    pub(crate) fn add(&mut self, func: Func, event: &Event) {
        let span = IttSpan::from_event(event);
        match func {
            Func::IttTask | Func::IttFrame => {
                let entry = self.spans.entry((span.domain, span.name)).or_default();
                entry.0 += 1;
                entry.1 += span.dur;
                if span.domain == DATA {
                    self.data.push(DataSpan {
                        pid: span.pid,
                        name: span.name,
                        start: span.start,
                        dur: span.dur,
                        id: span.id,
                        main: span.parent,
                    });
                }
            }
            Func::IttMarker if span.domain == DATA && span.name == OUT_OF_ORDER => self.out_of_order += 1,
            _ => {}
        }
    }

    /// Every (domain, name), most total time first.
    pub(crate) fn spans(&self, meta: &RunMeta) -> Vec<SpanRow> {
        let name = |id: u64| if id == 0 { String::new() } else { meta.string(id) };
        let mut rows: Vec<_> = self
            .spans
            .iter()
            .map(|(&(d, n), &(count, total_ns))| SpanRow { domain: name(d), name: name(n), count, total_ns })
            .collect();
        rows.sort_by(|a, b| {
            b.total_ns.cmp(&a.total_ns).then_with(|| (&a.domain, &a.name).cmp(&(&b.domain, &b.name)))
        });
        rows
    }

    /// `None` when the run has no DataLoader spans.
    pub(crate) fn data_pipeline(&self, meta: &RunMeta) -> Option<DataPipeline> {
        if self.data.is_empty() && self.out_of_order == 0 {
            return None;
        }
        let of = |name: u64| self.data.iter().filter(move |s| s.name == name);
        // Transforms by class name.
        let mut transforms: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for span in &self.data {
            if let Some(class) = meta.string(span.name).strip_prefix("transform:") {
                transforms.entry(class.to_string()).or_default().push(span.dur);
            }
        }
        let transforms = transforms
            .into_iter()
            .map(|(name, durations)| TransformRow { name, durations: Distribution::of(durations) })
            .collect();
        // Workers: the processes that fetched batches.
        let mut workers: BTreeMap<u32, (u64, u64, u64)> = BTreeMap::new();
        for span in of(FETCH) {
            let entry = workers.entry(span.pid).or_default();
            entry.0 += 1;
            entry.1 += span.dur;
            entry.2 = span.main;
        }
        let ppid = |pid: u32| meta.images.get(&pid).and_then(|i| i.first()).map(|i| i.info.ppid).unwrap_or(0);
        let workers = workers
            .into_iter()
            .map(|(pid, (batches, busy_ns, main_pid))| WorkerRow {
                pid,
                ppid: ppid(pid),
                main_pid,
                batches,
                busy_ns,
            })
            .collect();
        let mut batches: BTreeMap<(u64, u64), BatchRow> = BTreeMap::new();
        // Main processes: pid → (waits, wait ns, first request, last consumption end).
        let mut mains: BTreeMap<u32, (u64, u64, u64, u64)> = BTreeMap::new();
        for span in &self.data {
            let key = (span.main, span.id);
            let batch = || BatchRow { main_pid: span.main, id: span.id, ..Default::default() };
            match span.name {
                WAIT => {
                    batches.entry(key).or_insert_with(batch).wait_ns = Some(span.dur);
                    let main = mains.entry(span.pid).or_insert((0, 0, u64::MAX, 0));
                    main.0 += 1;
                    main.1 += span.dur;
                    main.2 = main.2.min(span.start);
                    main.3 = main.3.max(span.start + span.dur);
                }
                CONSUME => {
                    batches.entry(key).or_insert_with(batch).consume_ns = Some(span.dur);
                    let main = mains.entry(span.pid).or_insert((0, 0, u64::MAX, 0));
                    main.2 = main.2.min(span.start);
                    main.3 = main.3.max(span.start + span.dur);
                }
                FETCH => {
                    let batch = batches.entry(key).or_insert_with(batch);
                    batch.fetch_ns = Some(span.dur);
                    batch.worker_pid = Some(span.pid);
                }
                COLLATE => batches.entry(key).or_insert_with(batch).collate_ns = Some(span.dur),
                _ => {}
            }
        }
        let mains: Vec<MainRow> = mains
            .into_iter()
            .map(|(pid, (batches, wait_ns, first, last))| MainRow {
                pid,
                batches,
                wait_ns,
                wall_ns: last.saturating_sub(first),
            })
            .collect();
        let durations = |name: u64| Distribution::of(of(name).map(|s| s.dur).collect());
        Some(DataPipeline {
            batches: of(WAIT).count() as u64,
            wait_total_ns: mains.iter().map(|m| m.wait_ns).sum(),
            wall_ns: mains.iter().map(|m| m.wall_ns).sum(),
            out_of_order: self.out_of_order,
            wait: durations(WAIT),
            consume: durations(CONSUME),
            fetch: durations(FETCH),
            collate: durations(COLLATE),
            transforms,
            workers,
            mains,
            per_batch: batches.into_values().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let d = Distribution::of((1..=100).collect());
        assert_eq!((d.median_ns, d.p90_ns, d.p99_ns), (50, 90, 99));
        assert_eq!(Distribution::of(vec![]).p99_ns, 0);
        assert_eq!(Distribution::of(vec![7]).median_ns, 7);
    }

    #[test]
    fn waits_and_fetches_pair_by_main_pid_and_id() {
        let mut p = Pipeline::default();
        let span = |pid, name, start, dur, id, parent| {
            IttSpan {
                kind: Func::IttTask as u16,
                pid,
                name,
                start,
                dur,
                id,
                parent,
                domain: DATA,
                ..Default::default()
            }
            .into_event()
        };
        p.add(Func::IttTask, &span(11, FETCH, 0, 50, 1 << 32, 10));
        p.add(Func::IttTask, &span(10, WAIT, 40, 20, 1 << 32, 10));
        p.add(Func::IttTask, &span(10, CONSUME, 60, 40, 1 << 32, 10));
        let meta = RunMeta::default();
        let data = p.data_pipeline(&meta).unwrap();
        assert_eq!(data.wait_total_ns, 20);
        assert_eq!(data.wall_ns, 60);
        let batch = &data.per_batch[0];
        assert_eq!((batch.epoch(), batch.batch(), batch.worker_pid), (1, 0, Some(11)));
        assert_eq!(data.workers[0].busy_ns, 50);
        assert!((data.wait_share() - 20.0 / 60.0).abs() < 1e-12);
    }

    #[test]
    fn no_data_spans_means_no_pipeline() {
        assert_eq!(Pipeline::default().data_pipeline(&RunMeta::default()), None);
    }
}

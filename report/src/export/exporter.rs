//! The export of one run: its tables, the symbols they share, and the lookups that give each
//! row its file, partitions and kernel name. Fed batch by batch by the streaming reader
//! ([`Exporter::events`], [`Exporter::energy_device`], [`Exporter::energy_samples`]);
//! [`Exporter::finish`] adds the tables of the run's metadata and closes them all. Dropped
//! unfinished (a pass that was not exact), its tables remove the files they began.

use std::collections::HashMap;
use std::io;
use std::path::Path;

use bytes::Bytes;
use mlprof_format::energy::{EnergyDevice, EnergySample};
use mlprof_format::func::{Api, Class, Func};
use mlprof_format::gpu::{
    ACTIVITY_KERNEL, ACTIVITY_LINK, ACTIVITY_MEMCPY, ACTIVITY_MEMSET, ACTIVITY_OVERHEAD, ACTIVITY_SYNC,
    GpuActivity, copy_kind_name,
};
use mlprof_format::record::{Event, GpuCall, IttSpan};
use rustc_hash::FxHashMap;

use super::lookups::{FileTotals, Parts, Paths, PidPartitions};
use super::rows::{self, ProcessNames};
use super::table::{Symbols, Table};
use super::{Exported, table_dir};
use crate::run::kinds::{Kind, kind_of};
use crate::run::stream::{Batch, Learned};
use crate::run::{PathIndex, RunMeta, bytes_moved};

/// Every table of an export, in the order their folders are named and their rows counted.
const TABLES: [&str; 10] = [
    "events",
    "spans",
    "gpu_calls",
    "gpu_activity",
    "samples",
    "processes",
    "files",
    "energy",
    "runs",
    "ranges",
];

/// The tables rows are added to while the events stream, and what names their values.
pub(super) struct Exporter<'a> {
    meta: &'a RunMeta,
    dir: &'a Path,
    id: &'a str,
    events: Table,
    spans: Table,
    gpu: Table,
    gpu_activity: Table,
    energy: Table,
    /// Every string once, as a Parquet value; rows hold its index.
    symbols: Symbols,
    /// The symbol of each run string met, by string id.
    strings: FxHashMap<u64, u32>,
    /// The symbol of each function's name, by id (an array: looked up for every event).
    names: Vec<u32>,
    /// The partitions of each process's images.
    pids: PidPartitions,
    /// The paths met, each with its symbol and totals.
    paths: Paths,
    /// Kernel names, by (pid, function handle).
    kernels: FxHashMap<(u32, u64), u32>,
    /// Demangled kernel names of the GPU timeline, by string id.
    kernel_names: FxHashMap<u64, u32>,
    /// The thread of each host call linked to GPU work, by (pid, correlation id): links mostly
    /// come before the work they link (CUPTI hands its records over late), not always (the
    /// collector may drain the GPU records' lane before the calling thread's).
    launch_tids: FxHashMap<(u32, u32), u32>,
    /// GPU work whose link was not met yet, with its (kind, name) symbols and partition: written
    /// at the end, linked if its link came later (most are work no recorded call issued).
    unlinked: Vec<(GpuActivity, (u32, u32), usize)>,
    /// The `site_*` columns of each call site met, by run-wide id.
    sites: FxHashMap<u32, Option<rows::SiteColumns>>,
    /// The `kind` column's values: kernel, memcpy, memset, sync, overhead.
    activity_kinds: [u32; 5],
    /// `task`, `frame`, `marker`, `pause`, `resume`.
    span_kinds: [u32; 5],
    /// (name, kind, in_run) of each energy device described.
    devices: HashMap<u32, (u32, u32, bool)>,
    unknown_device: (u32, u32, bool),
    energy_part: usize,
}

impl<'a> Exporter<'a> {
    /// An export of the run `meta` into `dir` under run id `id`: the run's earlier export
    /// there, if any, removed (never another run's).
    pub(super) fn new(meta: &'a RunMeta, dir: &'a Path, id: &'a str) -> Result<Exporter<'a>, String> {
        let io_err = |e: io::Error| format!("writing {}: {e}", dir.display());
        for table in TABLES {
            match std::fs::remove_dir_all(table_dir(dir, table, id)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_err(e)),
                _ => {}
            }
        }
        let by_rank = Some("rank");
        let new = |name, specs, by| Table::new(name, specs, &table_dir(dir, name, id), by).map_err(io_err);
        let events = new("events", rows::EVENTS, by_rank)?;
        let spans = new("spans", rows::SPANS, by_rank)?;
        let gpu = new("gpu_calls", rows::GPU_CALLS, by_rank)?;
        let gpu_activity = new("gpu_activity", rows::GPU_ACTIVITY, by_rank)?;
        let mut energy = new("energy", rows::ENERGY, None)?;
        let mut symbols = Symbols::default();
        let mut names = vec![0; Func::ALL.iter().map(|f| *f as usize + 1).max().unwrap_or(0)];
        for &f in Func::ALL {
            names[f as usize] = symbols.add(Bytes::from_static(f.name().as_bytes()));
        }
        let span_kinds = ["task", "frame", "marker", "pause", "resume"].map(|k| text(&mut symbols, k));
        let activity_kinds =
            ["kernel", "memcpy", "memset", "sync", "overhead"].map(|k| text(&mut symbols, k));
        let unknown_device = (text(&mut symbols, "?"), text(&mut symbols, "?"), false);
        let energy_part = energy.partition("");
        Ok(Exporter {
            meta,
            dir,
            id,
            events,
            spans,
            gpu,
            gpu_activity,
            energy,
            symbols,
            strings: FxHashMap::default(),
            names,
            pids: PidPartitions::default(),
            paths: Paths::default(),
            kernels: FxHashMap::default(),
            kernel_names: FxHashMap::default(),
            launch_tids: FxHashMap::default(),
            unlinked: Vec::new(),
            sites: FxHashMap::default(),
            activity_kinds,
            span_kinds,
            devices: HashMap::new(),
            unknown_device,
            energy_part,
        })
    }

    /// A batch of events as rows of `events`, `spans` and `gpu_calls`; `learned`: the fds the
    /// stream learned, which name the files of the calls.
    pub(super) fn events(&mut self, batch: &Batch<'_>, learned: &mut Learned) -> io::Result<()> {
        let mut paths = batch.paths();
        for (at, event) in batch.records().iter().enumerate() {
            let Some(kind) = kind_of(event.kind) else { continue };
            let noted = paths.next(kind, event);
            let parts = self.parts(event.pid, event.start);
            match kind.api {
                Api::Libc => {
                    let site = self.site(batch.site(at));
                    self.call(kind, event, (noted, site), parts.0, learned)?
                }
                Api::Itt => {
                    let site = self.site(batch.site(at));
                    self.span(kind.func, event, parts.1, site)?
                }
                Api::CudaRuntime | Api::CudaDriver | Api::Nccl => self.gpu_call(kind, event, parts.2)?,
            }
        }
        Ok(())
    }

    /// The partitions of the image of `pid` running at `time`, in each partitioned table.
    #[inline]
    fn parts(&mut self, pid: u32, time: u64) -> Parts {
        let (events, spans, gpu, activity) =
            (&mut self.events, &mut self.spans, &mut self.gpu, &mut self.gpu_activity);
        self.pids.get(self.meta, pid, time, |rank| {
            (events.partition(rank), spans.partition(rank), gpu.partition(rank), activity.partition(rank))
        })
    }

    /// A frame of GPU activity: links remembered, work as rows of `gpu_activity`.
    pub(super) fn gpu_activity(&mut self, records: &[GpuActivity]) -> io::Result<()> {
        for record in records {
            let kind = match record.what {
                ACTIVITY_LINK => {
                    self.launch_tids.insert((record.pid, record.correlation), record.value as u32);
                    continue;
                }
                ACTIVITY_KERNEL => 0,
                ACTIVITY_MEMCPY => 1,
                ACTIVITY_MEMSET => 2,
                ACTIVITY_SYNC => 3,
                ACTIVITY_OVERHEAD => 4,
                _ => continue,
            };
            let name = match record.what {
                ACTIVITY_KERNEL => self.kernel_name(record.value),
                ACTIVITY_MEMCPY => text(&mut self.symbols, copy_kind_name(record.detail)),
                _ => self.activity_kinds[kind],
            };
            let part = self.parts(record.pid, record.start).3;
            let launch_tid = self.launch_tids.get(&(record.pid, record.correlation)).copied();
            let kind = self.activity_kinds[kind];
            if launch_tid.is_none() && record.correlation != 0 && record.what != ACTIVITY_SYNC {
                self.unlinked.push((*record, (kind, name), part));
                continue;
            }
            self.gpu_activity
                .push(&self.symbols, part, |row| rows::gpu_activity(row, record, (kind, name), launch_tid))?;
        }
        Ok(())
    }

    /// The work held back by [`Self::gpu_activity`], with the links met since.
    fn write_unlinked(&mut self) -> io::Result<()> {
        for (record, names, part) in std::mem::take(&mut self.unlinked) {
            let launch_tid = self.launch_tids.get(&(record.pid, record.correlation)).copied();
            self.gpu_activity
                .push(&self.symbols, part, |row| rows::gpu_activity(row, &record, names, launch_tid))?;
        }
        Ok(())
    }

    /// The symbol of a kernel's demangled name, by its string id (once per name).
    fn kernel_name(&mut self, id: u64) -> u32 {
        if let Some(&symbol) = self.kernel_names.get(&id) {
            return symbol;
        }
        let name = crate::run::demangle(&self.meta.string(id));
        let symbol = text(&mut self.symbols, &name);
        self.kernel_names.insert(id, symbol);
        symbol
    }

    /// The columns of run-wide site `id` (0 or unknown: none), made once per site.
    #[inline]
    fn site(&mut self, id: u32) -> Option<rows::SiteColumns> {
        if id == 0 {
            return None;
        }
        if let Some(columns) = self.sites.get(&id) {
            return *columns;
        }
        let columns = self.meta.sites.get(&id).map(|site| rows::SiteColumns {
            file: text(&mut self.symbols, &self.meta.string(site.file)),
            line: site.line as i32,
            function: text(&mut self.symbols, &self.meta.string(site.function)),
        });
        self.sites.insert(id, columns);
        columns
    }

    /// A libc call made at `site`: its row in `events`, its file's totals.
    #[inline]
    fn call(
        &mut self,
        kind: Kind,
        event: &Event,
        (noted, site): (Option<PathIndex>, Option<rows::SiteColumns>),
        part: usize,
        learned: &mut Learned,
    ) -> io::Result<()> {
        let meta = self.meta;
        let fds = &learned.fds;
        let slot = match kind.class {
            // An open names its own path: by the dense index the fd histories gave it (an
            // array), unless no fd ever named it.
            Class::Open if event.arg2 != 0 => Some(match noted.or_else(|| fds.path_index(event.arg2)) {
                Some(index) => self.paths.of_index(meta, &mut self.symbols, fds, index),
                None => self.paths.of_id(meta, &mut self.symbols, event.arg2),
            }),
            Class::Open | Class::Clock => None,
            _ if event.fd < 0 => None,
            _ => learned
                .fds
                .lookup_cached(meta, event.pid, event.fd, event.start, &mut learned.fd_cache)
                .map(|index| self.paths.of_index(meta, &mut self.symbols, &learned.fds, index)),
        };
        let bytes = bytes_moved(kind.func, event);
        let path = slot.map(|slot| {
            let (symbol, file) = self.paths.at(slot);
            count(file, kind.class, event, bytes);
            symbol
        });
        let name = self.names[event.kind as usize];
        self.events.push(&self.symbols, part, |row| rows::call(row, name, event, bytes, path, site))
    }

    /// An ITT task, frame or marker made at `site`: its row in `spans`.
    #[inline]
    fn span(
        &mut self,
        func: Func,
        event: &Event,
        part: usize,
        site: Option<rows::SiteColumns>,
    ) -> io::Result<()> {
        let span = IttSpan::from_event(event);
        let task = self.string(span.name);
        let domain = self.string(span.domain);
        let kind = self.span_kinds[match func {
            Func::IttTask => 0,
            Func::IttFrame => 1,
            Func::IttMarker => 2,
            Func::IttPause => 3,
            _ => 4,
        }];
        self.spans.push(&self.symbols, part, |row| rows::span(row, &span, (task, domain, kind), site))
    }

    /// A CUDA runtime or driver call or an NCCL call: its row in `gpu_calls`.
    #[inline]
    fn gpu_call(&mut self, kind: Kind, event: &Event, part: usize) -> io::Result<()> {
        let call = GpuCall::from_event(event);
        let kernel = (kind.class == Class::Launch).then(|| {
            *self.kernels.entry((event.pid, call.object)).or_insert_with(|| {
                let name = self.meta.kernel_name(event.pid, call.object);
                self.symbols.add(Bytes::from(name.into_bytes()))
            })
        });
        let (name, bytes) = (self.names[event.kind as usize], bytes_moved(kind.func, event));
        self.gpu.push(&self.symbols, part, |row| rows::gpu_call(row, name, &call, bytes, kernel))
    }

    /// An energy device, which the samples that follow name.
    pub(super) fn energy_device(&mut self, d: &EnergyDevice) {
        let (name, kind) = (text(&mut self.symbols, &d.name), text(&mut self.symbols, &d.kind));
        self.devices.insert(d.id, (name, kind, d.in_run));
    }

    /// Energy and device samples: rows of `energy`.
    pub(super) fn energy_samples(&mut self, samples: &[EnergySample]) -> io::Result<()> {
        for s in samples {
            let device = *self.devices.get(&s.device).unwrap_or(&self.unknown_device);
            self.energy.push(&self.symbols, self.energy_part, |row| rows::energy(row, s, device))?;
        }
        Ok(())
    }

    /// The symbol of run string `id`.
    fn string(&mut self, id: u64) -> u32 {
        let (meta, symbols) = (self.meta, &mut self.symbols);
        *self
            .strings
            .entry(id)
            .or_insert_with(|| symbols.add(Bytes::from(meta.strings.get(&id).cloned().unwrap_or_default())))
    }

    /// Writes the samples and the metadata tables (processes, files, the run) and closes
    /// every table: `source` is the run file, `warnings` what reading it noticed.
    pub(super) fn finish(mut self, source: &Path, warnings: Vec<String>) -> io::Result<Exported> {
        self.write_unlinked()?;
        // The small tables are written while the rest is built; the events table, whose last
        // rows take longest, after them (closing a table waits for its writer to take each job).
        for table in [&mut self.spans, &mut self.gpu, &mut self.gpu_activity, &mut self.energy] {
            table.close(&self.symbols)?;
        }
        let mut samples = super::samples::table(self.meta, source, (self.dir, self.id), &mut self.symbols)?;
        let mut processes = self.processes()?;
        let mut files = self.files()?;
        let mut runs = self.run(source)?;
        let mut ranges = self.ranges()?;
        for table in [&mut samples, &mut processes, &mut files, &mut runs, &mut ranges, &mut self.events] {
            table.close(&self.symbols)?;
        }
        let mut exported = Exported { run_id: self.id.to_string(), warnings, ..Default::default() };
        let Exporter { events, spans, gpu, gpu_activity, energy, symbols, .. } = self;
        let tables = [events, spans, gpu, gpu_activity, samples, processes, files, energy, runs, ranges];
        for (name, table) in TABLES.into_iter().zip(tables) {
            let table = table.finish(&symbols)?;
            exported.rows.push((name, table.rows));
            exported.bytes += table.bytes;
            if name == "events" {
                exported.events_bytes = table.bytes;
            }
        }
        Ok(exported)
    }

    /// A table of the run's metadata, unpartitioned.
    fn metadata_table(&self, name: &'static str, specs: &'static [super::table::Spec]) -> io::Result<Table> {
        Table::new(name, specs, &table_dir(self.dir, name, self.id), None)
    }

    /// `processes`: every image, in start order.
    fn processes(&mut self) -> io::Result<Table> {
        let meta = self.meta;
        let mut table = self.metadata_table("processes", rows::PROCESSES)?;
        let part = table.partition("");
        let (main_role, child_role) = (text(&mut self.symbols, "main"), text(&mut self.symbols, "child"));
        let mut images: Vec<(u32, usize)> =
            meta.images.iter().flat_map(|(&pid, images)| (0..images.len()).map(move |i| (pid, i))).collect();
        images.sort_by_key(|&(pid, i)| (meta.images[&pid][i].info.start_ns, pid, i));
        for (pid, index) in images {
            let image = &meta.images[&pid][index];
            let main = meta.rank_main(pid, index);
            let names = ProcessNames {
                role: image
                    .info
                    .rank
                    .as_ref()
                    .map(|_| if main == Some(pid) { main_role } else { child_role }),
                main,
                host: text(&mut self.symbols, meta.host_of(image.info.node)),
                cmdline: text(&mut self.symbols, &image.info.argv.join(" ")),
            };
            table.push(&self.symbols, part, |row| rows::process(row, pid, index, image, &names))?;
        }
        Ok(table)
    }

    /// `files`: the paths met, in path order.
    fn files(&mut self) -> io::Result<Table> {
        let mut table = self.metadata_table("files", rows::FILES)?;
        let part = table.partition("");
        let slots = std::mem::take(&mut self.paths.slots);
        let mut paths: Vec<(String, FileTotals)> =
            slots.into_iter().map(|slot| (self.meta.string(slot.id), slot.totals)).collect();
        paths.sort_by(|a, b| a.0.cmp(&b.0));
        for (path, totals) in &paths {
            let path = text(&mut self.symbols, path);
            table.push(&self.symbols, part, |row| rows::file(row, path, totals))?;
        }
        Ok(table)
    }

    /// `ranges`: the capture ranges (one, the whole run, without a capture option).
    fn ranges(&mut self) -> io::Result<Table> {
        let meta = self.meta;
        let mut table = self.metadata_table("ranges", rows::RANGES)?;
        let part = table.partition("");
        let start = meta.info.start_mono_ns;
        let last_edge = meta.range_edges.iter().map(|e| e.time_ns).max().unwrap_or(start);
        let end = meta.end.as_ref().map_or(last_edge, |e| e.end_ns.max(last_edge));
        let capture = meta.capture(start, end);
        let source = text(&mut self.symbols, capture.source.unwrap_or("none"));
        for range in &capture.ranges {
            let texts = [
                source,
                text(&mut self.symbols, &range.opened_by),
                text(&mut self.symbols, &range.closed_by),
            ];
            table.push(&self.symbols, part, |row| rows::range(row, start, range, texts))?;
        }
        Ok(table)
    }

    /// `runs`: the run itself, read from `source`.
    fn run(&mut self, source: &Path) -> io::Result<Table> {
        let meta = self.meta;
        let mut table = self.metadata_table("runs", rows::RUNS)?;
        let part = table.partition("");
        let texts =
            [&source.display().to_string(), &meta.info.host, &meta.command_line(), &meta.info.session]
                .map(|t| text(&mut self.symbols, t));
        table.push(&self.symbols, part, |row| rows::run(row, meta, texts))?;
        Ok(table)
    }
}

/// A string as a new symbol (strings of the run's metadata, each met once).
fn text(symbols: &mut Symbols, text: &str) -> u32 {
    symbols.add(Bytes::copy_from_slice(text.as_bytes()))
}

/// Adds a call on a file to the file's totals, as `mlprof summary` counts them.
#[inline]
fn count(file: &mut FileTotals, class: Class, event: &Event, bytes: u64) {
    file.calls += 1;
    file.total_ns += event.dur;
    match class {
        Class::Open if !event.is_error() => file.opens += 1,
        Class::Read => file.bytes_read += bytes,
        Class::Write => file.bytes_written += bytes,
        _ => {}
    }
}

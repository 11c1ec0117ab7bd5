//! The start-up section: for each program the run launched (or that joined it), the time from
//! its start to its first training step (`forward`, `backward` or `optimizer.step` in domain
//! `mlprof.phase`) or its first DataLoader batch (the end of its first `batch.wait`), whichever
//! comes first — both need `mlprof-collect --torch` — else its whole life; and what that time
//! went to: library loads (`dlopen`, which covers the loader's own opens, reads and maps and the
//! libraries' constructors), metadata calls (the stat family, access, directories, namespace
//! changes), opens and closes, reads, GPU calls and other calls. Calls made inside a `dlopen`
//! (by a library's constructor) count as library loading, once. Thread time: a process's
//! threads add up, so the parts can exceed the wall time.

use std::collections::HashMap;

use mlprof_format::func::{Api, Class, Func};
use mlprof_format::record::{Event, IttSpan};
use mlprof_format::string_id;
use serde::Serialize;

use crate::run::RunMeta;

const PHASE: u64 = string_id(b"mlprof.phase");
const FORWARD: u64 = string_id(b"forward");
const BACKWARD: u64 = string_id(b"backward");
const OPTIMIZER_STEP: u64 = string_id(b"optimizer.step");
const DATA: u64 = string_id(b"mlprof.data");
const WAIT: u64 = string_id(b"batch.wait");

/// Calls kept per program while its start-up is not known to be over; beyond, the section is
/// marked truncated.
const MAX_RECORDS: usize = 500_000;

/// Calls and their time.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Part {
    pub(crate) count: u64,
    pub(crate) total_ns: u64,
}

impl Part {
    fn add(&mut self, dur: u64) {
        self.count += 1;
        self.total_ns += dur;
    }
}

/// One library's loads during start-up (each `dlopen` of it, nested ones included).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct LibraryRow {
    pub(crate) path: String,
    pub(crate) loads: u64,
    pub(crate) total_ns: u64,
}

/// One program's start-up.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StartupRow {
    pub(crate) pid: u32,
    pub(crate) cmdline: String,
    /// The program's start, relative to the run start.
    pub(crate) start_ns: u64,
    pub(crate) duration_ns: u64,
    /// `first_step`, `first_batch`, or `exit` (no step seen: the program's whole life).
    pub(crate) until: &'static str,
    pub(crate) library_loads: Part,
    pub(crate) metadata: Part,
    pub(crate) opens: Part,
    pub(crate) reads: Part,
    pub(crate) gpu: Part,
    pub(crate) other: Part,
    /// Most load time first.
    pub(crate) libraries: Vec<LibraryRow>,
    /// More calls than the section keeps: the parts count the first ones only.
    pub(crate) truncated: bool,
}

#[derive(Clone, Copy)]
struct Kept {
    tid: u32,
    start: u64,
    dur: u64,
    func: Func,
    path: u64,
}

/// A program whose start-up is being followed.
struct Program {
    pid: u32,
    image: usize,
    start: u64,
    /// The image's end (the next image's start), for the program's whole life.
    limit: u64,
    /// The earliest step or batch seen so far, and which.
    end: Option<(u64, &'static str)>,
    kept: Vec<Kept>,
    truncated: bool,
}

/// The calls while the events stream by.
#[derive(Default)]
pub(super) struct StartupTally {
    /// pid → its followed images.
    programs: HashMap<u32, Vec<Program>>,
}

impl StartupTally {
    /// Follows every program of the run's root processes (those whose parent the run does not
    /// have: the launched command, processes that joined a session), each exec'd image apart.
    pub(super) fn new(meta: &RunMeta) -> StartupTally {
        let mut programs: HashMap<u32, Vec<Program>> = HashMap::new();
        for (&pid, images) in &meta.images {
            let Some(first) = images.first() else { continue };
            if first.info.forked || meta.images.contains_key(&first.info.ppid) {
                continue;
            }
            for (index, image) in images.iter().enumerate() {
                let limit = images.get(index + 1).map_or(u64::MAX, |next| next.info.start_ns);
                programs.entry(pid).or_default().push(Program {
                    pid,
                    image: index,
                    start: image.info.start_ns,
                    limit,
                    end: None,
                    kept: Vec::new(),
                    truncated: false,
                });
            }
        }
        StartupTally { programs }
    }

    pub(super) fn add(&mut self, func: Func, event: &Event) {
        let Some(images) = self.programs.get_mut(&event.pid) else { return };
        let Some(program) = images.iter_mut().rev().find(|p| p.start <= event.start) else { return };
        if event.start >= program.limit {
            return;
        }
        if func == Func::IttTask {
            let span = IttSpan::from_event(event);
            let marks = match (span.domain, span.name) {
                (PHASE, FORWARD | BACKWARD | OPTIMIZER_STEP) => Some((span.start, "first_step")),
                (DATA, WAIT) => Some((span.start.saturating_add(span.dur), "first_batch")),
                _ => None,
            };
            if let Some((at, why)) = marks
                && program.end.is_none_or(|(end, _)| at < end)
            {
                program.end = Some((at, why));
            }
            return;
        }
        if func.api() == Api::Itt || func.class() == Class::Syscall {
            return;
        }
        if program.end.is_some_and(|(end, _)| event.start >= end) {
            return;
        }
        if program.kept.len() >= MAX_RECORDS {
            program.truncated = true;
            return;
        }
        let path = if func == Func::Dlopen { event.arg2 } else { 0 };
        program.kept.push(Kept { tid: event.tid, start: event.start, dur: event.dur, func, path });
    }

    pub(super) fn finish(self, meta: &RunMeta, run_start: u64, run_end: u64) -> Vec<StartupRow> {
        let mut all: Vec<Program> = self.programs.into_values().flatten().collect();
        all.sort_by_key(|p| (p.start, p.pid, p.image));
        let any_step = all.iter().any(|p| p.end.is_some());
        let mut rows = Vec::new();
        for program in all {
            // Without steps, each root process's last program (what its exec chain ends in).
            if program.end.is_none() && (any_step || program.limit != u64::MAX) {
                continue;
            }
            rows.push(row(meta, program, run_start, run_end));
        }
        rows
    }
}

fn row(meta: &RunMeta, mut program: Program, run_start: u64, run_end: u64) -> StartupRow {
    let image = meta.images.get(&program.pid).and_then(|images| images.get(program.image));
    let exit = image.and_then(|i| i.exit.as_ref()).map(|e| e.time_ns);
    let (end, until) = match program.end {
        Some((end, why)) => (end, why),
        None => (exit.unwrap_or(run_end).min(program.limit), "exit"),
    };
    let mut row = StartupRow {
        pid: program.pid,
        cmdline: image.map(|i| i.info.argv.join(" ")).unwrap_or_default(),
        start_ns: program.start.saturating_sub(run_start),
        duration_ns: end.saturating_sub(program.start),
        until,
        library_loads: Part::default(),
        metadata: Part::default(),
        opens: Part::default(),
        reads: Part::default(),
        gpu: Part::default(),
        other: Part::default(),
        libraries: Vec::new(),
        truncated: program.truncated,
    };
    let mut libraries: HashMap<u64, (u64, u64)> = HashMap::new();
    program.kept.sort_by_key(|k| (k.tid, k.start, std::cmp::Reverse(k.dur)));
    // The outermost dlopen being swept on the current thread: (tid, its end).
    let mut loading: Option<(u32, u64)> = None;
    for k in program.kept.iter().filter(|k| k.start < end) {
        let k_end = k.start.saturating_add(k.dur);
        let inside = loading.is_some_and(|(tid, until)| tid == k.tid && k_end <= until);
        if k.func == Func::Dlopen {
            let library = libraries.entry(k.path).or_default();
            library.0 += 1;
            library.1 += k.dur;
        }
        if inside {
            continue;
        }
        let part = match k.func.class() {
            Class::Load if k.func == Func::Dlopen => {
                loading = Some((k.tid, k_end));
                &mut row.library_loads
            }
            Class::Stat | Class::Dir | Class::Namespace => &mut row.metadata,
            Class::Open | Class::Close => &mut row.opens,
            Class::Read => &mut row.reads,
            _ if k.func.api() != Api::Libc => &mut row.gpu,
            _ => &mut row.other,
        };
        part.add(k.dur);
    }
    let mut libraries: Vec<LibraryRow> = libraries
        .into_iter()
        .map(|(path, (loads, total_ns))| LibraryRow {
            path: if path == 0 { "(unnamed)".to_string() } else { meta.string(path) },
            loads,
            total_ns,
        })
        .collect();
    libraries.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.path.cmp(&b.path)));
    row.libraries = libraries;
    row
}

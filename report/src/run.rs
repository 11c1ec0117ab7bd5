//! A run file's metadata, read in a first pass (events are passed over), and the attribution
//! rules the reports share: which process image an event belongs to and which file an fd names.

use std::collections::HashMap;
use std::path::Path;

use mlprof_format::func::{Api, Class, Func};
use mlprof_format::record::{Event, GpuCall};
use mlprof_format::runfile::{
    AggregateSample, DropSample, Frame, ProcessExit, ProcessInfo, RunEnd, RunInfo, RunReader,
};

/// One process image: a process, or the program it exec'd into.
#[derive(Debug, Clone)]
pub struct Image {
    pub info: ProcessInfo,
    pub exit: Option<ProcessExit>,
}

#[derive(Default)]
pub struct RunMeta {
    pub info: RunInfo,
    pub strings: HashMap<u64, String>,
    /// Images per pid, in start order.
    pub images: HashMap<u32, Vec<Image>>,
    pub threads: HashMap<(u32, u32), String>,
    /// Kernel names: (pid, function handle) → name string id.
    pub symbols: HashMap<(u32, u64), u64>,
    /// Last cumulative sample per (stream, func, clock id).
    pub aggregates: HashMap<(u64, u16, Option<i32>), AggregateSample>,
    /// Last cumulative drop count per stream.
    pub drops: HashMap<u64, DropSample>,
    pub end: Option<RunEnd>,
    pub warnings: Vec<String>,
    pub truncated: bool,
    /// Which file each fd named when.
    pub fds: FdIntervals,
}

pub fn open(path: &Path) -> Result<RunReader, String> {
    RunReader::open(path).map_err(|e| format!("{}: {e}", path.display()))
}

impl RunMeta {
    pub fn load(path: &Path) -> Result<RunMeta, String> {
        let mut reader = open(path)?;
        let mut meta = RunMeta::default();
        let mut exits = Vec::new();
        loop {
            let frame = reader.next_frame().map_err(|e| format!("{}: {e}", path.display()))?;
            let Some(frame) = frame else { break };
            match frame {
                Frame::RunInfo(info) => meta.info = info,
                Frame::String { id, bytes } => {
                    meta.strings.insert(id, String::from_utf8_lossy(bytes).into_owned());
                }
                Frame::Process(info) => {
                    meta.images.entry(info.pid).or_default().push(Image { info, exit: None })
                }
                Frame::ProcessExit(exit) => exits.push(exit),
                Frame::Thread(thread) => {
                    meta.threads.insert((thread.pid, thread.tid), thread.name);
                }
                Frame::Aggregates(samples) => {
                    for sample in samples {
                        meta.aggregates.insert((sample.stream, sample.func, sample.clock_id), sample);
                    }
                }
                Frame::Drops(samples) => {
                    for sample in samples {
                        meta.drops.insert(sample.stream, sample);
                    }
                }
                Frame::Symbol(symbol) => {
                    meta.symbols.insert((symbol.pid, symbol.handle), symbol.name);
                }
                Frame::End(end) => meta.end = Some(end),
                Frame::Events(events) => {
                    for event in events {
                        meta.fds.observe(event);
                    }
                }
                // Energy frames are read by `mlprof energy` and `convert` in their own pass.
                Frame::EnergyDevice(_) | Frame::EnergySamples(_) | Frame::EnergyNote(_) => {}
            }
        }
        for images in meta.images.values_mut() {
            images.sort_by_key(|i| i.info.start_ns);
        }
        meta.fds.seal();
        // An exit belongs to the last image that started before it; the launcher's own record
        // (with the signal, if any) completes what the exit hook saw.
        for exit in exits {
            if let Some(images) = meta.images.get_mut(&exit.pid) {
                let at =
                    images.iter().rposition(|i| i.info.start_ns <= exit.time_ns).unwrap_or(images.len() - 1);
                let image = &mut images[at];
                match &mut image.exit {
                    Some(known) => {
                        known.exit_code = known.exit_code.or(exit.exit_code);
                        known.signal = known.signal.or(exit.signal);
                    }
                    None => image.exit = Some(exit),
                }
            }
        }
        meta.warnings = reader.warnings().to_vec();
        meta.truncated = reader.truncated();
        Ok(meta)
    }

    /// Index of the image of `pid` running at `time_ns` (the latest that started before it).
    pub fn image_at(&self, pid: u32, time_ns: u64) -> Option<usize> {
        let images = self.images.get(&pid)?;
        Some(images.iter().rposition(|i| i.info.start_ns <= time_ns).unwrap_or(0))
    }

    /// The demangled name of kernel `handle` launched by `pid` (a fork child uses the names
    /// its parent defined), or its address.
    pub fn kernel_name(&self, pid: u32, handle: u64) -> String {
        let mut owner = pid;
        for _ in 0..8 {
            if let Some(id) = self.symbols.get(&(owner, handle)) {
                return demangle(&self.path(*id));
            }
            match self.images.get(&owner).and_then(|i| i.first()).filter(|i| i.info.forked) {
                Some(image) => owner = image.info.ppid,
                None => break,
            }
        }
        format!("kernel@{handle:#x}")
    }

    pub fn dropped(&self) -> u64 {
        self.drops.values().map(|d| d.dropped).sum()
    }

    pub fn path(&self, id: u64) -> String {
        self.strings.get(&id).cloned().unwrap_or_else(|| format!("<string {id:#x}>"))
    }

    pub fn command_line(&self) -> String {
        if self.info.command.is_empty() {
            format!("attach session '{}'", self.info.session)
        } else {
            self.info.command.join(" ")
        }
    }
}

/// Which file each (process, fd) named over time, from the opens and closes of the whole run.
/// Reads and writes are looked up by their start time, not by their place in the file: records
/// of different threads reach the file in drain order, which is not causal when one thread
/// closes an fd and another reuses its number. A fork child inherits its parent's fds as they
/// were when the child started.
#[derive(Default)]
pub struct FdIntervals {
    /// (pid, fd) → (time, path id or 0 for closed), sorted by time. A fast non-cryptographic
    /// hash: this map is looked up once per call in every report.
    changes: rustc_hash::FxHashMap<(u32, i32), Vec<(u64, u64)>>,
}

impl FdIntervals {
    fn observe(&mut self, event: &Event) {
        let Some(func) = Func::from_id(event.kind) else { return };
        if func.api() != Api::Libc || event.is_error() || event.fd < 0 {
            return;
        }
        // An fd exists from the end of its open and is gone from the start of its close: the
        // kernel finishes a close before another thread's open can reuse the number, so these
        // two times order them correctly however late either thread read its clock.
        let end = event.start.saturating_add(event.dur);
        match func.class() {
            Class::Open if event.arg2 != 0 => {
                self.changes.entry((event.pid, event.fd)).or_default().push((end, event.arg2))
            }
            Class::Close => self.changes.entry((event.pid, event.fd)).or_default().push((event.start, 0)),
            _ => {}
        }
    }

    fn seal(&mut self) {
        for changes in self.changes.values_mut() {
            changes.sort_by_key(|&(time, _)| time);
        }
    }

    /// The path id `fd` of `pid` named at `time`.
    fn lookup(&self, meta: &RunMeta, pid: u32, fd: i32, time: u64) -> Option<u64> {
        let (mut pid, mut time) = (pid, time);
        for _ in 0..16 {
            if let Some(changes) = self.changes.get(&(pid, fd)) {
                // Changes strictly before the call: a close's own change is at its start.
                let at = changes.partition_point(|&(t, _)| t < time);
                if at > 0 {
                    let path = changes[at - 1].1;
                    return (path != 0).then_some(path);
                }
            }
            // Nothing in this process before `time`: a fork child's fd comes from its parent.
            let image = meta.images.get(&pid).and_then(|images| images.first()).filter(|i| i.info.forked)?;
            (pid, time) = (image.info.ppid, image.info.start_ns);
        }
        None
    }

    /// The path id a call's fd refers to (an open names its own path).
    pub fn path_of(&self, meta: &RunMeta, event: &Event) -> Option<u64> {
        let func = Func::from_id(event.kind)?;
        if func.api() != Api::Libc {
            // GPU and ITT records keep other things where libc records keep the fd.
            return None;
        }
        match func.class() {
            Class::Open => (event.arg2 != 0).then_some(event.arg2),
            Class::Clock => None,
            Class::Map if event.fd < 0 => None,
            _ if event.fd < 0 => None,
            _ => self.lookup(meta, event.pid, event.fd, event.start),
        }
    }
}

/// Bytes a call moved: read/written for I/O, copied/set/allocated for GPU memory calls, sent
/// for collectives (count × datatype size).
pub fn bytes_moved(func: Func, event: &Event) -> u64 {
    match func.class() {
        Class::Read | Class::Write => event.arg2,
        Class::Copy | Class::Memset | Class::Alloc => event.arg,
        Class::Collective => {
            let call = GpuCall::from_event(event);
            call.arg.saturating_mul(nccl_datatype_bytes(call.aux & 0xff))
        }
        _ => 0,
    }
}

/// Size of an NCCL datatype (ncclInt8 = 0 … ncclFloat8e5m2 = 11).
pub fn nccl_datatype_bytes(datatype: u32) -> u64 {
    match datatype {
        0 | 1 | 10 | 11 => 1,
        6 | 9 => 2,
        2 | 3 | 7 => 4,
        4 | 5 | 8 => 8,
        _ => 0,
    }
}

pub fn nccl_datatype_name(datatype: u32) -> &'static str {
    match datatype {
        0 => "int8",
        1 => "uint8",
        2 => "int32",
        3 => "uint32",
        4 => "int64",
        5 => "uint64",
        6 => "float16",
        7 => "float32",
        8 => "float64",
        9 => "bfloat16",
        10 => "float8e4m3",
        11 => "float8e5m2",
        _ => "unknown",
    }
}

pub fn nccl_op_name(op: u32) -> &'static str {
    match op {
        0 => "sum",
        1 => "prod",
        2 => "max",
        3 => "min",
        4 => "avg",
        0xff => "none",
        _ => "custom",
    }
}

/// A C++ name demangled for display; other names as they are.
pub fn demangle(name: &str) -> String {
    if name.starts_with("_Z")
        && let Ok(symbol) = cpp_demangle::Symbol::new(name)
        && let Ok(text) = symbol.demangle(&cpp_demangle::DemangleOptions::default())
    {
        return text;
    }
    name.to_string()
}

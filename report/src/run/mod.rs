//! A run file's metadata, read in a first pass, and the attribution rules the reports share:
//! which process image an event belongs to and which file an fd names.

mod calls;
mod fds;
pub(crate) mod kinds;
mod mapped;
mod native_sites;
mod path_table;
pub(crate) mod ranges;
mod ranks;
pub(crate) mod source;
pub(crate) mod stack_names;
pub(crate) mod stream;
mod syscall_names;

pub(crate) use calls::{bytes_moved, demangle, is_collective_op, nccl_datatype_name, nccl_op_name};
pub(crate) use fds::{FdCache, FdIntervals, PathIndex};
pub(crate) use mapped::Mapping;
pub(crate) use syscall_names::syscall_name;

use std::collections::HashMap;
use std::path::Path;

use mlprof_format::func::{Api, Func};
use mlprof_format::runfile::{
    AggregateSample, DropSample, Frame, NodeInfo, ProcessExit, ProcessInfo, RunEnd, RunInfo, RunReader,
};

/// Why records were lost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct DropReasons {
    /// The thread's lane was full (its collector fell behind).
    pub(crate) lane_full: u64,
    /// The thread found no lane (more threads at once than lanes, or no memory to back one).
    pub(crate) no_lane: u64,
    /// A signal handler's call while the thread was writing a record, or the call a thread was
    /// cancelled in.
    pub(crate) interrupted: u64,
}

/// One process image: a process, or the program it exec'd into.
#[derive(Debug, Clone)]
pub struct Image {
    pub info: ProcessInfo,
    pub(crate) exit: Option<ProcessExit>,
}

/// Everything about a run except its events: what the reports keep in memory while they
/// stream the events in a second pass.
#[derive(Default)]
pub struct RunMeta {
    pub info: RunInfo,
    pub(crate) strings: HashMap<u64, String>,
    /// Images per pid, in start order.
    pub(crate) images: HashMap<u32, Vec<Image>>,
    pub(crate) threads: HashMap<(u32, u32), String>,
    /// Kernel names: (pid, function handle) → name string id.
    pub(crate) symbols: HashMap<(u32, u64), u64>,
    /// Call sites (`--sites`), by run-wide id; native callers named ([`native_sites`]).
    pub(crate) sites: HashMap<u32, mlprof_format::site::SiteInfo>,
    /// Native callers' sites folded into the first of the same function: id → that id (the
    /// stream hands out the standing id).
    pub(crate) folded_sites: HashMap<u32, u32>,
    /// Sampled stacks (`--sample`): the modules and stacks by id, and how the sampling went
    /// (the samples themselves are read by the reports that use them).
    pub(crate) modules: HashMap<u32, mlprof_format::sample::ModuleInfo>,
    pub(crate) stacks: HashMap<u32, mlprof_format::sample::StackInfo>,
    /// The Python frames sampled stacks pass through, by id (format 1.8).
    pub(crate) python_frames: HashMap<u32, mlprof_format::sample::PythonFrameInfo>,
    pub(crate) sampling: Option<mlprof_format::sample::SamplingInfo>,
    /// Last cumulative sample per (stream, func, clock id).
    pub(crate) aggregates: HashMap<(u64, u16, Option<i32>), AggregateSample>,
    /// Last cumulative drop count per stream.
    pub(crate) drops: HashMap<u64, DropSample>,
    pub(crate) end: Option<RunEnd>,
    pub warnings: Vec<String>,
    pub(crate) truncated: bool,
    /// Which file each fd named when.
    pub(crate) fds: FdIntervals,
    /// Threads that recorded ITT spans or GPU calls: on them a call may lie inside a slice
    /// recorded after it (a task, a runtime call around a driver call). On the other threads
    /// no call encloses another, which lets a trace writer put each out as it comes.
    pub(crate) span_threads: rustc_hash::FxHashSet<(u32, u32)>,
    /// The nodes of a merged run (`mlprof merge`), by [`NodeInfo::node`]; empty for a run of
    /// one collector.
    pub nodes: Vec<NodeInfo>,
    /// How the run captured (`None`: no capture option, or a file before format 1.9: the
    /// whole run is one range) and the edges of its ranges, in file order.
    pub(crate) capture: Option<mlprof_format::range::CaptureInfo>,
    pub(crate) range_edges: Vec<mlprof_format::range::RangeEdge>,
}

/// Opens a run file for a streaming pass, with the path in any error message.
pub(crate) fn open(path: &Path) -> Result<RunReader, String> {
    RunReader::open(path).map_err(|e| format!("{}: {e}", path.display()))
}

impl RunMeta {
    pub(crate) fn load(path: &Path) -> Result<RunMeta, String> {
        Self::load_with(path, false, false)
    }

    /// Like [`RunMeta::load`], but corrupt data after the header ends the run with a warning
    /// instead of an error: what precedes it is the run (`mlprof convert` writes what was
    /// readable).
    pub(crate) fn load_readable(path: &Path) -> Result<RunMeta, String> {
        Self::load_with(path, true, false)
    }

    /// Like [`RunMeta::load`], but events are not read: `fds` and `span_threads` stay empty.
    /// For `mlprof export`, which learns them from the events as it streams them.
    pub(crate) fn load_without_events(path: &Path) -> Result<RunMeta, String> {
        Self::load_with(path, false, true)
    }

    /// Like [`RunMeta::load_readable`], but events are not read: `fds` and `span_threads` stay
    /// empty. For `mlprof convert`, which learns them from the events as it streams them.
    pub fn load_metadata(path: &Path) -> Result<RunMeta, String> {
        Self::load_with(path, true, true)
    }

    fn load_with(path: &Path, tolerate_corruption: bool, skip_events: bool) -> Result<RunMeta, String> {
        let mut reader = if skip_events {
            RunReader::open_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?
        } else {
            open(path)?
        };
        let mut meta = RunMeta::default();
        let mut exits = Vec::new();
        let mut corrupt = None;
        loop {
            let frame = match reader.next_frame() {
                Ok(frame) => frame,
                Err(e) if tolerate_corruption => {
                    corrupt = Some(format!("{}: {e}; reading what was recorded before it", path.display()));
                    break;
                }
                Err(e) => return Err(format!("{}: {e}", path.display())),
            };
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
                Frame::Site(site) => {
                    meta.sites.insert(site.id, site);
                }
                Frame::EventSites(_) | Frame::Samples(_) => {}
                Frame::Module(module) => {
                    meta.modules.insert(module.id, module);
                }
                Frame::Stack(stack) => {
                    meta.stacks.insert(stack.id, stack);
                }
                Frame::Sampling(info) => meta.sampling = Some(info),
                Frame::PythonFrame(frame) => {
                    meta.python_frames.insert(frame.id, frame);
                }
                Frame::Capture(info) => meta.capture = Some(info),
                Frame::RangeEdge(edge) => meta.range_edges.push(edge),
                Frame::End(end) => meta.end = Some(end),
                Frame::Node(node) => meta.nodes.push(node),
                Frame::Events(events) => {
                    let mut last = None;
                    for event in events {
                        meta.fds.observe(event);
                        let spans = Func::from_id(event.kind).is_some_and(|f| f.api() != Api::Libc);
                        if spans && last != Some((event.pid, event.tid)) {
                            last = Some((event.pid, event.tid));
                            meta.span_threads.insert((event.pid, event.tid));
                        }
                    }
                }
                // Energy frames are read by `mlprof energy` and `convert` in their own pass, GPU
                // activity frames by the reports that show the GPU timeline.
                Frame::EnergyDevice(_)
                | Frame::EnergySamples(_)
                | Frame::EnergyNote(_)
                | Frame::GpuActivity(_) => {}
            }
        }
        for images in meta.images.values_mut() {
            images.sort_by_key(|i| i.info.start_ns);
        }
        meta.folded_sites = native_sites::name(&mut meta.sites, &mut meta.strings);
        meta.fds.seal(&meta.images);
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
        meta.warnings.extend(corrupt);
        meta.truncated = reader.truncated();
        Ok(meta)
    }

    /// Index of the image of `pid` running at `time_ns` (the latest that started before it).
    pub(crate) fn image_at(&self, pid: u32, time_ns: u64) -> Option<usize> {
        let images = self.images.get(&pid)?;
        Some(images.iter().rposition(|i| i.info.start_ns <= time_ns).unwrap_or(0))
    }

    /// The demangled name of kernel `handle` launched by `pid` (a fork child uses the names
    /// its parent defined), or its address.
    pub(crate) fn kernel_name(&self, pid: u32, handle: u64) -> String {
        let mut owner = pid;
        for _ in 0..8 {
            if let Some(id) = self.symbols.get(&(owner, handle)) {
                return demangle(&self.string(*id));
            }
            match self.images.get(&owner).and_then(|i| i.first()).filter(|i| i.info.forked) {
                Some(image) => owner = image.info.ppid,
                None => break,
            }
        }
        format!("kernel@{handle:#x}")
    }

    /// Records lost over the whole run (the last count of every stream).
    pub(crate) fn dropped(&self) -> u64 {
        self.drops.values().map(|d| d.dropped).sum()
    }

    /// Records lost, by why (see `DropSample`).
    pub(crate) fn drops_by_reason(&self) -> DropReasons {
        let mut reasons = DropReasons::default();
        for sample in self.drops.values() {
            if sample.stream == 0 {
                reasons.no_lane += sample.dropped;
            } else {
                reasons.interrupted += sample.interrupted;
                reasons.lane_full += sample.dropped.saturating_sub(sample.interrupted);
            }
        }
        reasons
    }

    /// Interned string `id` (a path, a task or domain name, a kernel symbol), or a
    /// placeholder naming the id when the run never defined it.
    /// Whether the run was recorded with `--sample` (or holds stacks): the reports of samples
    /// read no further when not.
    pub(crate) fn has_samples(&self) -> bool {
        self.sampling.is_some() || !self.stacks.is_empty()
    }

    /// The site that stands for site `id` of an event: a native caller's site folded into the
    /// first of its function ([`native_sites`]), else `id` itself.
    #[inline]
    pub(crate) fn standing_site(&self, id: u32) -> u32 {
        self.folded_sites.get(&id).copied().unwrap_or(id)
    }

    pub(crate) fn string(&self, id: u64) -> String {
        self.strings.get(&id).cloned().unwrap_or_else(|| format!("<string {id:#x}>"))
    }

    /// The launched command, or the session served in attach mode.
    pub(crate) fn command_line(&self) -> String {
        if self.info.command.is_empty() {
            format!("attach session '{}'", self.info.session)
        } else {
            self.info.command.join(" ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    #[test]
    fn a_metadata_pass_skips_events_and_their_tables() {
        let run = testing::write("metadata-only");
        let full = RunMeta::load(run.path()).unwrap();
        let meta = RunMeta::load_metadata(run.path()).unwrap();
        assert_eq!(meta.images.len(), full.images.len());
        assert_eq!((meta.threads.len(), meta.strings.len()), (full.threads.len(), full.strings.len()));
        assert_eq!(meta.images[&11][0].exit.as_ref().map(|e| e.exit_code), Some(Some(0)));
        assert_eq!(meta.dropped(), 3);
        assert!(meta.end.is_some() && !meta.truncated);
        assert_eq!((meta.fds.changes_kept(), meta.span_threads.len()), (0, 0));
        assert!(full.fds.changes_kept() > 0);
    }

    #[test]
    fn a_metadata_pass_over_a_cut_events_frame_says_truncated() {
        let run = testing::write("metadata-cut");
        let bytes = std::fs::read(run.path()).unwrap();
        // The events frame: the first frame of kind FRAME_EVENTS (16-byte file header, then
        // frames of an 8-byte header — kind u16, length u32 at 4 — and a padded payload).
        let mut at = 16;
        while u16::from_le_bytes([bytes[at], bytes[at + 1]]) != mlprof_format::runfile::FRAME_EVENTS {
            let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
            at += 8 + len.div_ceil(8) * 8;
        }
        let cut = run.path().with_extension("cut");
        std::fs::write(&cut, &bytes[..at + 8 + 100]).unwrap();
        let meta = RunMeta::load_metadata(&cut);
        std::fs::remove_file(&cut).unwrap();
        let meta = meta.unwrap();
        assert!(meta.truncated, "{:?}", meta.warnings);
        assert!(meta.warnings.iter().any(|w| w.contains("inside a frame")), "{:?}", meta.warnings);
        assert_eq!(meta.images.len(), 2, "what precedes the cut is read");
    }
}

//! What to convert: a time window, some processes, some kinds of event, parts of at most N
//! events, and how processes are named.

use mlprof_format::func::Api;

use crate::run::Image;

/// Kinds of event a trace can be limited to (`--only`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kinds {
    /// C library calls, and the counters of aggregated clock reads.
    pub(crate) io: bool,
    /// ITT tasks, frames and markers (PyTorch ops, phases, DataLoader spans and flows).
    pub(crate) itt: bool,
    /// CUDA runtime, CUDA driver and NCCL calls.
    pub(crate) gpu: bool,
    /// Energy, power and the other device counters.
    pub(crate) energy: bool,
    /// CPU samples and their stacks (`mlprof-collect --sample`).
    pub(crate) samples: bool,
}

impl Kinds {
    pub const ALL: Kinds = Kinds { io: true, itt: true, gpu: true, energy: true, samples: true };

    /// `io,itt,gpu,energy,samples` (any subset, comma-separated).
    pub fn parse(list: &str) -> Result<Kinds, String> {
        let mut kinds = Kinds { io: false, itt: false, gpu: false, energy: false, samples: false };
        for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "io" => kinds.io = true,
                "itt" => kinds.itt = true,
                "gpu" => kinds.gpu = true,
                "energy" => kinds.energy = true,
                "samples" => kinds.samples = true,
                _ => return Err(format!("unknown kind '{word}' (expected io, itt, gpu, energy, samples)")),
            }
        }
        Ok(kinds)
    }

    pub(super) fn api(&self, api: Api) -> bool {
        match api {
            Api::Libc => self.io,
            Api::Itt => self.itt,
            Api::CudaRuntime | Api::CudaDriver | Api::Nccl => self.gpu,
        }
    }
}

/// Names a process's track from its pid and its images (exec order). The hook where a merged
/// multi-node run will put its node and rank.
pub type ProcessNamer<'a> = &'a dyn Fn(u32, &[Image]) -> String;

/// The default process name: its programs in exec order, and the pid.
pub fn process_name(pid: u32, images: &[Image]) -> String {
    let names: Vec<String> = images.iter().map(|i| i.info.argv.join(" ")).collect();
    format!("{} (pid {pid})", names.join(" → exec "))
}

/// What to convert. The default is everything, in one trace.
#[derive(Clone, Copy)]
pub struct Options<'a> {
    /// Only events that end at or after this time (ns on the run's clock)…
    pub from_ns: Option<u64>,
    /// …and start at or before this one.
    pub to_ns: Option<u64>,
    /// Only these processes (empty: all). Energy tracks are the machine's, kept.
    pub pids: &'a [u32],
    pub only: Kinds,
    /// Start a new part after this many events (slices and instants).
    pub split_every: Option<u64>,
    pub process_name: ProcessNamer<'a>,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            from_ns: None,
            to_ns: None,
            pids: &[],
            only: Kinds::ALL,
            split_every: None,
            process_name: &process_name,
        }
    }
}

impl Options<'_> {
    /// Whether [start, end] meets the time window.
    #[inline]
    pub(super) fn in_window(&self, start: u64, end: u64) -> bool {
        self.from_ns.is_none_or(|from| end >= from) && self.to_ns.is_none_or(|to| start <= to)
    }

    #[inline]
    pub(super) fn pid(&self, pid: u32) -> bool {
        self.pids.is_empty() || self.pids.contains(&pid)
    }
}

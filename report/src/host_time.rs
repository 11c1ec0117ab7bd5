//! What a process was doing at each instant, for the breakdowns that cut time by it (a main
//! process's wall time in `activity`, a GPU's idle time in `gpu_timeline`): the categories in
//! priority order, which calls and spans count in each, and the time each category has to
//! itself (a sweep over the interval ends).

use mlprof_format::func::{Api, Class, Func};
use mlprof_format::record::{Event, FLAG_NESTED, IttSpan};

use crate::pipeline::{DATA, WAIT};
use crate::shapes::SHAPES;

/// What a process's time went to, in priority order (an instant in two categories counts in
/// the first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Category {
    DataWait = 0,
    GpuSync = 1,
    FileIo = 2,
    OpsPhases = 3,
}

impl Category {
    pub(crate) const ALL: [Category; 4] =
        [Category::DataWait, Category::GpuSync, Category::FileIo, Category::OpsPhases];

    /// The label reports print.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Category::DataWait => "data wait",
            Category::GpuSync => "GPU sync",
            Category::FileIo => "file I/O",
            Category::OpsPhases => "ops & phases",
        }
    }

    /// The key in JSON and HTML attributes.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Category::DataWait => "data_wait",
            Category::GpuSync => "gpu_sync",
            Category::FileIo => "file_io",
            Category::OpsPhases => "ops_phases",
        }
    }
}

/// The category of a recorded call or span, if any: a DataLoader wait (`batch.wait`), a GPU
/// call that blocks the host (not nested in another), a call on a descriptor that names a file
/// (`names_file`, asked of libc calls only: the caller may know already) or an open, or any
/// other ITT task (ops and training phases; the DataLoader's own and shape markers aside).
pub(crate) fn category_of(func: Func, event: &Event, names_file: impl FnOnce() -> bool) -> Option<Category> {
    match func.api() {
        Api::Itt => {
            if func.class() != Class::Span {
                return None;
            }
            let span = IttSpan::from_event(event);
            match (span.domain, span.name) {
                (DATA, WAIT) => Some(Category::DataWait),
                (DATA, _) | (SHAPES, _) => None,
                _ => Some(Category::OpsPhases),
            }
        }
        Api::Libc => {
            let file = func.class() == Class::Open || names_file();
            (file && !matches!(func.class(), Class::Clock | Class::Ioctl)).then_some(Category::FileIo)
        }
        _ => (func.blocks_host() && event.flags & FLAG_NESTED == 0).then_some(Category::GpuSync),
    }
}

/// Time in `[from, to)` covered by the intervals of each of `N` categories (`index` of each),
/// each instant counted once in the first (lowest-index) category active at it. Intervals may
/// overlap and nest in any way (threads of one process, spans around calls); parts outside
/// `[from, to)` are cut.
pub(crate) fn exclusive_times<T: Copy, const N: usize>(
    intervals: &[(T, u64, u64)],
    index: impl Fn(T) -> usize,
    from: u64,
    to: u64,
) -> [u64; N] {
    let mut edges: Vec<(u64, i8, usize)> = Vec::with_capacity(intervals.len() * 2);
    for &(category, start, end) in intervals {
        let (start, end) = (start.clamp(from, to), end.clamp(from, to));
        let category = index(category);
        if start < end && category < N {
            edges.push((start, 1, category));
            edges.push((end, -1, category));
        }
    }
    edges.sort_unstable_by_key(|&(t, _, _)| t);
    let mut active = [0i64; N];
    let mut out = [0u64; N];
    let mut last = from;
    for (t, delta, category) in edges {
        if t > last {
            if let Some(top) = active.iter().position(|&n| n > 0) {
                out[top] += t - last;
            }
            last = t;
        }
        active[category] += delta as i64;
    }
    out
}

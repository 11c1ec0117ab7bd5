//! CPU samples (`mlprof-collect --sample`) as samples of their threads, each with the stack
//! it ran: every stack of the run is declared to the writer once per part, its frames named
//! through [`crate::run::stack_names`] (the names `mlprof hotspots` shows).
//!
//! A frame that no symbol names is declared without a function: the writer keeps its module
//! (path, build id) and offset, from which Perfetto's own symbolizers can name it later. An
//! address in no module (JIT code, the vdso) has neither, so its name is the address.

use std::io;

use mlprof_format::sample::{CpuSample, NO_MODULE, StackFrame};
use mlprof_trace::{CodeFrame, FrameHandle, ModuleHandle, StackHandle, TraceWriter};
use rustc_hash::FxHashMap;

use super::converter::Converter;
use crate::run::stack_names::StackNames;
use crate::run::stream::SpanThreads;

/// The writer's handles of what the samples ran (the current part's), and the frames' names
/// (kept for the whole conversion).
#[derive(Default)]
pub(super) struct Stacks {
    names: StackNames,
    modules: FxHashMap<u32, ModuleHandle>,
    /// By frame and whether it is a return address (which is named from the byte before it).
    frames: FxHashMap<(StackFrame, bool), FrameHandle>,
    /// By the run's stack id (`None`: no frame to show).
    stacks: FxHashMap<u32, Option<StackHandle>>,
    scratch: Vec<FrameHandle>,
}

impl Stacks {
    /// A new writer took over: its handles start afresh.
    pub(super) fn new_part(&mut self) {
        self.modules.clear();
        self.frames.clear();
        self.stacks.clear();
    }
}

impl<W: TraceWriter> Converter<'_, W> {
    /// A frame of CPU samples: those the options keep (by pid and time) on their threads;
    /// returns how many.
    pub(super) fn samples(&mut self, samples: &[CpuSample], span_threads: &SpanThreads) -> io::Result<u64> {
        let options = self.options();
        let mut written = 0;
        for sample in samples {
            if !options.pid(sample.pid) || !options.in_window(sample.time_ns, sample.time_ns) {
                continue;
            }
            let thread = self.thread(sample.pid, sample.tid, span_threads)?.handle;
            let stack = self.stack(sample.stack);
            self.out.sample(thread, sample.time_ns, stack)?;
            written += 1;
        }
        Ok(written)
    }

    /// The handle of the run's stack `id`, declared the first time.
    fn stack(&mut self, id: u32) -> Option<StackHandle> {
        if let Some(&handle) = self.stacks.stacks.get(&id) {
            return handle;
        }
        let meta = self.meta;
        let handle = meta.stacks.get(&id).filter(|s| !s.frames.is_empty()).map(|stack| {
            let mut frames = std::mem::take(&mut self.stacks.scratch);
            frames.clear();
            // Leaf first, as the run and the writer both have them.
            for (at, &frame) in stack.frames.iter().enumerate() {
                frames.push(self.frame(frame, at > 0));
            }
            let handle = self.out.stack(&frames);
            self.stacks.scratch = frames;
            handle
        });
        self.stacks.stacks.insert(id, handle);
        handle
    }

    /// The handle of a frame (`returns`: a return address), declared the first time.
    fn frame(&mut self, frame: StackFrame, returns: bool) -> FrameHandle {
        if let Some(&handle) = self.stacks.frames.get(&(frame, returns)) {
            return handle;
        }
        let meta = self.meta;
        let module = meta.modules.get(&frame.module).filter(|_| frame.module != NO_MODULE).map(|info| {
            let (modules, out) = (&mut self.stacks.modules, &mut self.out);
            *modules.entry(frame.module).or_insert_with(|| out.code_module(&info.path, &info.build_id))
        });
        let name = self.stacks.names.frame(meta, frame, returns);
        let function = match (&name.function, module) {
            (Some(function), _) => Some(function.to_string()),
            (None, None) => Some(name.label(frame)),
            (None, Some(_)) => None,
        };
        let handle =
            self.out.code_frame(&CodeFrame { module, offset: frame.offset, function: function.as_deref() });
        self.stacks.frames.insert((frame, returns), handle);
        handle
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Kinds, Options, convert};
    use crate::run::RunMeta;
    use crate::testing::{START, TempRun};
    use mlprof_format::runfile::{RunEnd, RunInfo, RunWriter};
    use mlprof_format::sample::{CpuSample, ModuleInfo, NO_MODULE, StackFrame, StackInfo};
    use mlprof_trace::TraceWriter;
    use mlprof_trace::perfetto::PerfettoWriter;

    /// Samples kept by each cut: all, one process, a time window, `--only` without and with
    /// samples. Three samples of pid 10 (100, 200, 300 ns after the start) and one of pid 11
    /// (200, not unwound).
    #[test]
    fn samples_are_cut_like_events() {
        let path = std::env::temp_dir().join(format!("mlprof-report-samples-{}.bin", std::process::id()));
        let run = TempRun::new(path.clone());
        let mut w =
            RunWriter::create(&path, &RunInfo { start_mono_ns: START, ..RunInfo::default() }).unwrap();
        w.write_module(&ModuleInfo { id: 1, path: "/nonexistent/libx.so".into(), build_id: vec![1, 2] })
            .unwrap();
        let frames =
            vec![StackFrame { module: 1, offset: 0x10 }, StackFrame { module: NO_MODULE, offset: 0x7f00 }];
        w.write_stack(&StackInfo { id: 1, frames, truncated: false }).unwrap();
        let sample = |pid, at, stack| CpuSample { time_ns: START + at, pid, tid: pid, stack };
        w.write_samples(&[sample(10, 100, 1), sample(10, 200, 1), sample(11, 200, 0), sample(10, 300, 1)])
            .unwrap();
        w.finish(&RunEnd::default()).unwrap();
        let meta = RunMeta::load_metadata(run.path()).unwrap();
        let written = |options: &Options<'_>| {
            let outcome = convert(
                &meta,
                run.path(),
                options,
                &mut |_| PerfettoWriter::new(Vec::new(), false),
                &mut |_, w| w.finish().map(drop),
                &mut |_| {},
            )
            .unwrap();
            outcome.samples
        };
        let all = Options::default();
        assert_eq!(written(&all), 4);
        assert_eq!(written(&Options { pids: &[10], ..all }), 3);
        let window = Options { from_ns: Some(START + 150), to_ns: Some(START + 250), ..all };
        assert_eq!(written(&window), 2);
        assert_eq!(written(&Options { only: Kinds::parse("io,itt").unwrap(), ..all }), 0);
        assert_eq!(written(&Options { only: Kinds::parse("samples").unwrap(), ..all }), 4);
    }
}

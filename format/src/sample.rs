//! Sampled CPU stacks (since format 1.7; `mlprof-collect --sample`): what each thread of the job
//! was running, a few hundred times a second, unwound by the collector from the user stack the
//! kernel copied (`perf_event_open`, the `cpu-clock` software event).
//!
//! **In the run file.** A [`ModuleInfo`] ([`FRAME_MODULE`]) names each file that code was met
//! in, once, before the first stack that uses it; a [`StackInfo`] ([`FRAME_STACK`]) gives each
//! distinct stack an id, once, before the first sample that uses it; [`FRAME_SAMPLES`] frames
//! hold the samples ([`CpuSample`]: time on the run's CLOCK_MONOTONIC axis, thread, stack), in
//! batches; [`FRAME_SAMPLING`] frames say how the sampling went ([`SamplingInfo`], cumulative:
//! the last one holds). A frame's `offset` is the address's offset in its module's *file*
//! (the same in every process, whatever the load address), which the reports turn into a
//! function through the file's symbol tables. Older readers skip all four kinds.
//!
//! **Python frames** (since 1.8). Where a stack ran CPython's evaluation loop, the collector
//! read the thread's Python frames and set them in place of the loop's native frames (as
//! `py-spy --native` shows them): a [`StackFrame`] of module [`PYTHON_MODULE`] whose `offset`
//! is the id of a [`PythonFrameInfo`] ([`FRAME_PYTHON`], written once before the first stack
//! that uses it). A 1.7 reader skips those frames and sees an address in no module.

use serde::{Deserialize, Serialize};

/// Run-file frame kind: a [`ModuleInfo`].
pub const FRAME_MODULE: u16 = 25;
/// Run-file frame kind: a [`StackInfo`].
pub const FRAME_STACK: u16 = 26;
/// Run-file frame kind: a batch of [`CpuSample`]s.
pub const FRAME_SAMPLES: u16 = 27;
/// Run-file frame kind: a [`SamplingInfo`].
pub const FRAME_SAMPLING: u16 = 28;

/// Run-file frame kind: a [`PythonFrameInfo`] (since 1.8).
pub const FRAME_PYTHON: u16 = 29;

/// [`StackFrame::module`] of a Python frame: `offset` is a [`PythonFrameInfo::id`].
pub const PYTHON_MODULE: u32 = u32::MAX;

/// [`StackFrame::module`] of an address in no file-backed mapping (JIT code, an anonymous
/// mapping, the vdso): `offset` is then the address itself.
pub const NO_MODULE: u32 = 0;

/// A file that sampled code was met in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleInfo {
    /// The id stacks refer to (never [`NO_MODULE`]).
    pub id: u32,
    /// Its path when it was mapped.
    pub path: String,
    /// Its GNU build id (empty: none found), to find the same file, or its debug file, later.
    pub build_id: Vec<u8>,
}

/// A Python frame met in sampled stacks: a line of a function of a file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PythonFrameInfo {
    /// The id stack frames refer to (never 0).
    pub id: u32,
    /// The file, as the code object names it.
    pub file: String,
    /// The code object's qualified name (3.11+; its name before).
    pub function: String,
    /// The line the frame was at (0: unknown).
    pub line: u32,
}

/// One frame of a stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StackFrame {
    /// The [`ModuleInfo`] the address lies in ([`NO_MODULE`]: none).
    pub module: u32,
    /// The address's offset in the module's file (a return address for every frame but the
    /// leaf, as unwinding found it); the address itself with [`NO_MODULE`].
    pub offset: u64,
}

/// A distinct stack.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackInfo {
    /// The id samples refer to (never 0).
    pub id: u32,
    /// Leaf first.
    pub frames: Vec<StackFrame>,
    /// Unwinding stopped before the stack's root (a frame without unwind information, a stack
    /// deeper than the copy the kernel made).
    pub truncated: bool,
}

/// One sample: thread `tid` of process `pid` ran stack `stack` at `time_ns`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuSample {
    /// CLOCK_MONOTONIC ns, the run's axis.
    pub time_ns: u64,
    /// The process.
    pub pid: u32,
    /// The thread (its kernel tid).
    pub tid: u32,
    /// A [`StackInfo`] id (0: the stack could not be unwound at all).
    pub stack: u32,
}

/// How the sampling went (cumulative; the last frame holds).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SamplingInfo {
    /// Samples a second asked for, per thread running on a CPU.
    pub hz: u32,
    /// Samples written.
    pub samples: u64,
    /// Samples the kernel lost (its buffer was full) or the collector could not read.
    pub lost: u64,
    /// Why there are no samples: `perf_event_open` refused, with the cause and the fix (empty:
    /// sampling ran).
    pub refused: String,
    /// Bytes of user stack the kernel copied per sample.
    pub stack_bytes: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runfile::{Frame, RunEnd, RunInfo, RunReader, RunWriter};

    /// A module, a stack, samples and the sampling info round-trip, in file order.
    #[test]
    fn samples_round_trip() {
        let mut w = RunWriter::new(Vec::new(), &RunInfo::default()).unwrap();
        let module = ModuleInfo { id: 1, path: "/lib/libz.so.1".into(), build_id: vec![0xab; 20] };
        let frames =
            vec![StackFrame { module: 1, offset: 0x1234 }, StackFrame { module: NO_MODULE, offset: 7 }];
        let stack = StackInfo { id: 1, frames, truncated: true };
        let samples = vec![CpuSample { time_ns: 5, pid: 10, tid: 11, stack: 1 }; 3];
        let info = SamplingInfo { hz: 250, samples: 3, lost: 1, refused: String::new(), stack_bytes: 16384 };
        let python =
            PythonFrameInfo { id: 1, file: "/srv/train.py".into(), function: "step".into(), line: 7 };
        w.write_python_frame(&python).unwrap();
        w.write_module(&module).unwrap();
        w.write_stack(&stack).unwrap();
        w.write_samples(&samples).unwrap();
        w.write_sampling(&info).unwrap();
        let bytes = w.finish(&RunEnd::default()).unwrap();
        let mut r = RunReader::new(&bytes[..]).unwrap();
        let mut seen = Vec::new();
        while let Some(frame) = r.next_frame().unwrap() {
            match frame {
                Frame::Module(m) => seen.push(format!("{m:?}") == format!("{module:?}")),
                Frame::Stack(s) => seen.push(s == stack),
                Frame::Samples(s) => seen.push(s == samples),
                Frame::Sampling(s) => seen.push(s == info),
                Frame::PythonFrame(p) => seen.push(p == python),
                _ => {}
            }
        }
        assert_eq!(seen, [true; 5]);
    }
}

//! Sampled stacks in a merged run (`--sample` on the nodes): each node numbers its modules and
//! stacks from 1, so the merge gives each distinct module (path and build id) and stack one id
//! of its own, renumbers each node's samples beside them (pids and times as the node's events),
//! and ends with one sampling note for the job: samples and losses summed, refusals named by
//! host.

use std::collections::HashMap;

use mlprof_format::ids::Ids;
use mlprof_format::sample::{
    CpuSample, ModuleInfo, NO_MODULE, PYTHON_MODULE, PythonFrameInfo, SamplingInfo, StackFrame, StackInfo,
};

/// The merged run's modules and stacks, and each node's last sampling note.
#[derive(Default)]
pub(super) struct MergedSamples {
    modules: Ids<(String, Vec<u8>)>,
    python: Ids<(String, String, u32)>,
    stacks: Ids<Vec<StackFrame>>,
}

/// One node's module and stack ids → the merged run's, and its sampling note.
#[derive(Default)]
pub(super) struct NodeSamples {
    modules: HashMap<u32, u32>,
    python: HashMap<u32, u32>,
    stacks: HashMap<u32, u32>,
    pub(super) sampling: Option<SamplingInfo>,
}

impl MergedSamples {
    /// A node's module: its merged id noted; the module to write when new to the merged run.
    pub(super) fn module(&mut self, node: &mut NodeSamples, module: ModuleInfo) -> Option<ModuleInfo> {
        let (id, new) = self.modules.id((module.path.clone(), module.build_id.clone()));
        node.modules.insert(module.id, id);
        new.then_some(ModuleInfo { id, ..module })
    }

    /// A node's Python frame: its merged id noted; the frame to write when new.
    pub(super) fn python_frame(
        &mut self,
        node: &mut NodeSamples,
        frame: PythonFrameInfo,
    ) -> Option<PythonFrameInfo> {
        let (id, new) = self.python.id((frame.file.clone(), frame.function.clone(), frame.line));
        node.python.insert(frame.id, id);
        new.then_some(PythonFrameInfo { id, ..frame })
    }

    /// A node's stack, its frames' modules renumbered: its merged id noted; the stack to write
    /// when new.
    pub(super) fn stack(&mut self, node: &mut NodeSamples, stack: StackInfo) -> Option<StackInfo> {
        let frames: Vec<StackFrame> = stack
            .frames
            .iter()
            .map(|f| match f.module {
                NO_MODULE => *f,
                PYTHON_MODULE => {
                    let id = u32::try_from(f.offset).ok().and_then(|id| node.python.get(&id)).copied();
                    StackFrame { offset: u64::from(id.unwrap_or(0)), ..*f }
                }
                module => {
                    StackFrame { module: node.modules.get(&module).copied().unwrap_or(NO_MODULE), ..*f }
                }
            })
            .collect();
        let (id, new) = self.stacks.id(frames.clone());
        node.stacks.insert(stack.id, id);
        new.then_some(StackInfo { id, frames, truncated: stack.truncated })
    }
}

impl NodeSamples {
    /// A node's samples with merged stack ids, `pid` (and tid) and `time` rewritten as the
    /// node's events are.
    pub(super) fn renumber(
        &self,
        samples: &[CpuSample],
        pid: impl Fn(u32) -> u32,
        time: impl Fn(u64) -> u64,
    ) -> Vec<CpuSample> {
        samples
            .iter()
            .map(|s| CpuSample {
                time_ns: time(s.time_ns),
                pid: pid(s.pid),
                tid: pid(s.tid),
                stack: if s.stack == 0 { 0 } else { self.stacks.get(&s.stack).copied().unwrap_or(0) },
            })
            .collect()
    }
}

/// The job's sampling note from the nodes' (host, note): `None` when no node sampled.
pub(super) fn job_sampling<'a>(
    nodes: impl Iterator<Item = (&'a str, &'a SamplingInfo)>,
) -> Option<SamplingInfo> {
    let mut job: Option<SamplingInfo> = None;
    for (host, note) in nodes {
        let j = job
            .get_or_insert_with(|| SamplingInfo { stack_bytes: note.stack_bytes, ..SamplingInfo::default() });
        j.hz = j.hz.max(note.hz);
        j.samples += note.samples;
        j.lost += note.lost;
        if !note.refused.is_empty() {
            let said = format!("{host}: {}", note.refused);
            j.refused = if j.refused.is_empty() { said } else { format!("{}; {said}", j.refused) };
        }
    }
    job
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two nodes with the same library (ids 1 and 2 on their sides) and the same stack in it
    /// share one module and one stack; a node's samples take the merged ids.
    #[test]
    fn the_same_module_and_stack_on_two_nodes_are_one() {
        let mut merged = MergedSamples::default();
        let (mut a, mut b) = (NodeSamples::default(), NodeSamples::default());
        let lib = |id| ModuleInfo { id, path: "/lib/libx.so".into(), build_id: vec![7] };
        let stack = |id, module| StackInfo {
            id,
            frames: vec![StackFrame { module, offset: 0x10 }],
            truncated: false,
        };
        assert!(merged.module(&mut a, lib(1)).is_some());
        assert!(
            merged.module(&mut b, ModuleInfo { id: 1, path: "/bin/b".into(), build_id: vec![] }).is_some()
        );
        assert_eq!(merged.module(&mut b, lib(2)), None);
        assert_eq!(merged.stack(&mut a, stack(4, 1)).map(|s| s.id), Some(1));
        assert_eq!(merged.stack(&mut b, stack(9, 2)), None);
        let renumbered =
            b.renumber(&[CpuSample { time_ns: 5, pid: 3, tid: 4, stack: 9 }], |p| p + 100, |t| t + 1);
        assert_eq!(renumbered, [CpuSample { time_ns: 6, pid: 103, tid: 104, stack: 1 }]);
        let notes = [
            SamplingInfo { hz: 499, samples: 10, lost: 1, ..Default::default() },
            SamplingInfo {
                hz: 499,
                refused: "perf_event_open refused (EACCES)".into(),
                ..Default::default()
            },
        ];
        let job = job_sampling([("a", &notes[0]), ("b", &notes[1])].into_iter()).unwrap();
        assert_eq!(
            (job.samples, job.lost, job.refused.as_str()),
            (10, 1, "b: perf_event_open refused (EACCES)")
        );
    }

    /// The same Python line on two nodes (ids 3 and 1 on their sides) is one merged frame,
    /// written once, and the nodes' stacks through it are one stack.
    #[test]
    fn the_same_python_frame_on_two_nodes_is_one() {
        let mut merged = MergedSamples::default();
        let (mut a, mut b) = (NodeSamples::default(), NodeSamples::default());
        let line =
            |id| PythonFrameInfo { id, file: "/srv/train.py".into(), function: "step".into(), line: 7 };
        let other = PythonFrameInfo { id: 1, file: "/srv/train.py".into(), function: "load".into(), line: 3 };
        assert_eq!(merged.python_frame(&mut a, other).map(|f| f.id), Some(1));
        assert_eq!(merged.python_frame(&mut a, line(3)).map(|f| f.id), Some(2));
        assert_eq!(merged.python_frame(&mut b, line(1)), None);
        let stack = |id, python| StackInfo {
            id,
            frames: vec![
                StackFrame { module: NO_MODULE, offset: 0x10 },
                StackFrame { module: PYTHON_MODULE, offset: python },
            ],
            truncated: false,
        };
        let first = merged.stack(&mut a, stack(1, 3)).unwrap();
        assert_eq!(first.frames[1], StackFrame { module: PYTHON_MODULE, offset: 2 });
        assert_eq!(merged.stack(&mut b, stack(5, 1)), None, "the same stack");
    }
}

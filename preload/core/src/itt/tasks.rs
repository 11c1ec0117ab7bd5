//! ITT tasks, frames and instants as ring records: a per-thread stack of open tasks (so a task
//! is written once, at its end, with its nesting depth), names sent once per process at begin.

use mlprof_format::func::Func;
use mlprof_format::record::IttSpan;

use super::abi::{IttDomain, IttId, IttStringHandle};
use super::intern::{domain_identity, handle_identity};
use crate::recorder::{self, lane, strings};

// ---- per-thread task stacks ----------------------------------------------------------------

const MAX_DEPTH: usize = 32;

#[derive(Clone, Copy, Default)]
struct OpenTask {
    start: u64,
    name: u64,
    domain: u64,
    id: u64,
    parent: u64,
    record: bool,
}

struct TaskStack {
    depth: core::cell::Cell<usize>,
    tasks: [core::cell::Cell<OpenTask>; MAX_DEPTH],
    frame: core::cell::Cell<OpenTask>,
}

thread_local! {
    static STACK: TaskStack = const {
        TaskStack {
            depth: core::cell::Cell::new(0),
            tasks: [const { core::cell::Cell::new(OpenTask { start: 0, name: 0, domain: 0, id: 0, parent: 0, record: false }) }; MAX_DEPTH],
            frame: core::cell::Cell::new(OpenTask { start: 0, name: 0, domain: 0, id: 0, parent: 0, record: false }),
        }
    };
}

/// Sends the names a span refers to (once per process) and writes the span.
fn write_span(func: Func, task: OpenTask, end: u64, depth: usize, names: &[(u64, &[u8])]) {
    recorder::with_lane(|ring, lane, pid, thread| {
        for &(id, bytes) in names {
            if id != 0 && !lane::send_string(ring, lane, pid, thread.tid.get(), id, bytes) {
                ring.count_drop(lane);
                return;
            }
        }
        let span = IttSpan {
            kind: func as u16,
            pid,
            tid: thread.tid.get(),
            depth: depth as i32,
            start: task.start,
            dur: end.saturating_sub(task.start),
            id: task.id,
            name: task.name,
            domain: task.domain,
            parent: task.parent,
            ..IttSpan::default()
        };
        ring.push(lane, &span.into_event());
    });
}

///
/// # Safety
/// Pointer arguments are null or what an ITT static part passes: objects made by a
/// `__itt_*_create` (ours or its own) and NUL-terminated names, alive for the process's life.
pub unsafe fn task_begin(domain: *const IttDomain, id: IttId, parent: IttId, name: *const IttStringHandle) {
    let (domain_id, domain_name, own) = domain_identity(domain);
    let (name_id, name_bytes) = handle_identity(name);
    let task = OpenTask {
        start: crate::clock::now(),
        name: name_id,
        domain: domain_id,
        id: id.d1,
        parent: parent.d1,
        record: !own,
    };
    let _ = STACK.try_with(|stack| {
        let depth = stack.depth.get();
        if let Some(slot) = stack.tasks.get(depth) {
            slot.set(task);
            // Names are sent at begin: the span is written at end, when they may be gone. Once
            // sent (PyTorch reuses a few hundred op names a million times), two lookups in the
            // process's set of sent strings replace a trip to the lane.
            if task.record && !(strings::was_sent(domain_id) && strings::was_sent(name_id)) {
                write_names(&[(domain_id, domain_name), (name_id, name_bytes)]);
            }
        }
        stack.depth.set(depth + 1);
    });
}

pub fn task_end() {
    let end = crate::clock::now();
    let _ = STACK.try_with(|stack| {
        let depth = stack.depth.get();
        if depth == 0 {
            return;
        }
        stack.depth.set(depth - 1);
        if let Some(task) = stack.tasks.get(depth - 1).map(|slot| slot.get())
            && task.record
        {
            write_span(Func::IttTask, task, end, depth - 1, &[]);
        }
    });
}

///
/// # Safety
/// Pointer arguments are null or what an ITT static part passes: objects made by a
/// `__itt_*_create` (ours or its own) and NUL-terminated names, alive for the process's life.
pub unsafe fn frame_begin(domain: *const IttDomain, id: *const IttId) {
    let (domain_id, domain_name, own) = domain_identity(domain);
    // Safety: a frame id pointer is either null or points to the caller's id.
    let id = unsafe { id.as_ref() }.map_or(0, |id| id.d1);
    let task =
        OpenTask { start: crate::clock::now(), name: 0, domain: domain_id, id, parent: 0, record: !own };
    let _ = STACK.try_with(|stack| stack.frame.set(task));
    if !own {
        write_names(&[(domain_id, domain_name)]);
    }
}

pub fn frame_end() {
    let end = crate::clock::now();
    let _ = STACK.try_with(|stack| {
        let task = stack.frame.replace(OpenTask::default());
        if task.record && task.start != 0 {
            write_span(Func::IttFrame, task, end, 0, &[]);
        }
    });
}

/// A marker, pause or resume: an instant (`id`: the marker's `__itt_id.d1`).
///
/// # Safety
/// Pointer arguments are null or what an ITT static part passes: objects made by a
/// `__itt_*_create` (ours or its own) and NUL-terminated names, alive for the process's life.
pub unsafe fn instant(func: Func, domain: *const IttDomain, name: *const IttStringHandle, id: u64) {
    let (domain_id, domain_name, own) = domain_identity(domain);
    if own {
        return;
    }
    let (name_id, name_bytes) = handle_identity(name);
    let now = crate::clock::now();
    let task = OpenTask { start: now, name: name_id, domain: domain_id, id, ..OpenTask::default() };
    write_span(func, task, now, 0, &[(domain_id, domain_name), (name_id, name_bytes)]);
}

fn write_names(names: &[(u64, &[u8])]) {
    recorder::with_lane(|ring, lane, pid, thread| {
        for &(id, bytes) in names {
            if id != 0 {
                lane::send_string(ring, lane, pid, thread.tid.get(), id, bytes);
            }
        }
    });
}

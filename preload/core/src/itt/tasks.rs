//! ITT tasks, frames and instants as ring records: a per-thread stack of open tasks (so a task
//! is written once, at its end, with its nesting depth), names sent once per process at begin.

use core::cell::Cell;

use mlprof_format::func::Func;
use mlprof_format::record::IttSpan;

use super::abi::{IttDomain, IttId, IttStringHandle};
use super::intern::{Identity, domain_identity, handle_identity};
use crate::guard::{self, ThreadRef};
use crate::recorder::{self, lane};

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

/// Where an open task waits for its end, one field at a time: a task often ends a few dozen
/// instructions after it began, while its stores are still on their way to the cache, and a
/// copy of the whole task (which the compiler makes with 16-byte loads across two 8-byte
/// stores) then cannot be forwarded from them and waits for them: measured, three quarters of
/// `task_end`'s time. Loads of the width of the stores are forwarded.
struct TaskSlot {
    start: Cell<u64>,
    name: Cell<u64>,
    domain: Cell<u64>,
    id: Cell<u64>,
    parent: Cell<u64>,
    record: Cell<bool>,
}

impl TaskSlot {
    const fn empty() -> TaskSlot {
        TaskSlot {
            start: Cell::new(0),
            name: Cell::new(0),
            domain: Cell::new(0),
            id: Cell::new(0),
            parent: Cell::new(0),
            record: Cell::new(false),
        }
    }

    #[inline(always)]
    fn set(&self, task: OpenTask) {
        self.start.set(task.start);
        self.name.set(task.name);
        self.domain.set(task.domain);
        self.id.set(task.id);
        self.parent.set(task.parent);
        self.record.set(task.record);
    }

    /// The task, each field read on its own (see the type's comment).
    #[inline(always)]
    fn get(&self) -> OpenTask {
        let field = |cell: &Cell<u64>| {
            // Safety: the cell's own value, read through its pointer; volatile only so that the
            // compiler does not fuse neighbouring fields into one wider load.
            unsafe { core::ptr::read_volatile(cell.as_ptr()) }
        };
        OpenTask {
            start: field(&self.start),
            name: field(&self.name),
            domain: field(&self.domain),
            id: field(&self.id),
            parent: field(&self.parent),
            record: self.record.get(),
        }
    }
}

struct TaskStack {
    depth: Cell<usize>,
    tasks: [TaskSlot; MAX_DEPTH],
    frame: TaskSlot,
}

thread_local! {
    static STACK: TaskStack = const {
        TaskStack { depth: Cell::new(0), tasks: [const { TaskSlot::empty() }; MAX_DEPTH], frame: TaskSlot::empty() }
    };
}

/// Runs `f` with this thread's task stack, reached through the thread's state after the first
/// time (see `ThreadState::itt_tasks`); `None` only where the thread-local is gone.
#[inline(always)]
fn with_stack<R>(f: impl FnOnce(ThreadRef, &TaskStack) -> R) -> Option<R> {
    let state = guard::current()?;
    let mut address = state.itt_tasks.get();
    if address == 0 {
        address = STACK.try_with(|stack| stack as *const TaskStack as usize).ok()?;
        state.itt_tasks.set(address);
    }
    // Safety: `address` is this thread's own `STACK` (the state it is cached in is per thread,
    // and a fork child's thread has the same address space layout): a thread-local with no
    // destructor, valid for the whole life of the thread, used only through `Cell`s.
    Some(f(state, unsafe { &*(address as *const TaskStack) }))
}

/// The record of a task, frame or instant ending at `end`.
fn span_event(
    func: Func,
    task: OpenTask,
    end: u64,
    depth: usize,
    pid: u32,
    tid: u32,
) -> mlprof_format::record::Event {
    IttSpan {
        kind: func as u16,
        pid,
        tid,
        depth: depth as i32,
        start: task.start,
        dur: end.saturating_sub(task.start),
        id: task.id,
        name: task.name,
        domain: task.domain,
        parent: task.parent,
        ..IttSpan::default()
    }
    .into_event()
}

/// Writes a span whose names were sent: the hot path, as a hooked call's record.
#[inline(always)]
fn write_span(thread: ThreadRef, func: Func, task: OpenTask, end: u64, depth: usize) {
    recorder::push_timed(thread, |pid, tid| span_event(func, task, end, depth, pid, tid));
}

/// Sends those of `names` this process has not sent yet (once sent, a load from each of our
/// objects, or a lookup in the process's set of sent strings, replaces a trip to the lane). For
/// a task's or frame's begin: a name that finds no room is sent at a later begin.
#[inline(always)]
fn send_names(names: &[&Identity<'_>]) {
    if !names.iter().all(|name| name.was_sent()) {
        send_unsent(names, false);
    }
}

/// [`send_names`] for a record written at once (an instant): false when a name found no room,
/// and then the record is counted as dropped in the same visit to the lane.
#[inline(always)]
fn send_names_or_drop(names: &[&Identity<'_>]) -> bool {
    names.iter().all(|name| name.was_sent()) || send_unsent(names, true)
}

#[cold]
fn send_unsent(names: &[&Identity<'_>], drop_when_unsent: bool) -> bool {
    let mut sent = true;
    recorder::with_lane(|ring, lane, pid, thread| {
        for name in names {
            if !name.was_sent() && !lane::send_string(ring, lane, pid, thread.tid.get(), name.id, name.bytes)
            {
                sent = false;
            }
        }
        if !sent && drop_when_unsent {
            ring.count_drop(lane);
        }
    });
    sent
}

///
/// # Safety
/// Pointer arguments are null or what an ITT static part passes: objects made by a
/// `__itt_*_create` (ours or its own) and NUL-terminated names, alive for the process's life.
pub unsafe fn task_begin(domain: *const IttDomain, id: IttId, parent: IttId, name: *const IttStringHandle) {
    let (domain, own) = domain_identity(domain);
    let name = handle_identity(name);
    // Outside a capture range the task is not recorded (decided at its begin, as a call's),
    // and the clock is not read; it still goes on the stack, for its end to pop.
    let record = !own && recorder::session::capturing();
    let task = OpenTask {
        start: if record { crate::clock::now() } else { 0 },
        name: name.id,
        domain: domain.id,
        id: id.d1,
        parent: parent.d1,
        record,
    };
    let _ = with_stack(|_, stack| {
        let depth = stack.depth.get();
        if let Some(slot) = stack.tasks.get(depth) {
            slot.set(task);
            // Names are sent at begin: the span is written at end, when they may be gone
            // (PyTorch reuses a few hundred op names a million times). One that finds no room
            // is sent at a later begin.
            if task.record {
                send_names(&[&domain, &name]);
            }
        }
        stack.depth.set(depth + 1);
    });
}

pub fn task_end() {
    let end = crate::clock::now();
    let _ = with_stack(|thread, stack| {
        let depth = stack.depth.get();
        if depth == 0 {
            return;
        }
        stack.depth.set(depth - 1);
        if let Some(task) = stack.tasks.get(depth - 1).map(|slot| slot.get())
            && task.record
        {
            write_span(thread, Func::IttTask, task, end, depth - 1);
        }
    });
}

///
/// # Safety
/// Pointer arguments are null or what an ITT static part passes: objects made by a
/// `__itt_*_create` (ours or its own) and NUL-terminated names, alive for the process's life.
pub unsafe fn frame_begin(domain: *const IttDomain, id: *const IttId) {
    let (domain, own) = domain_identity(domain);
    // Safety: a frame id pointer is either null or points to the caller's id.
    let id = unsafe { id.as_ref() }.map_or(0, |id| id.d1);
    let record = !own && recorder::session::capturing();
    let task = OpenTask {
        start: if record { crate::clock::now() } else { 0 },
        name: 0,
        domain: domain.id,
        id,
        parent: 0,
        record,
    };
    let _ = with_stack(|_, stack| stack.frame.set(task));
    if !own {
        send_names(&[&domain]);
    }
}

pub fn frame_end() {
    let end = crate::clock::now();
    let _ = with_stack(|thread, stack| {
        let task = stack.frame.get();
        stack.frame.set(OpenTask::default());
        if task.record && task.start != 0 {
            write_span(thread, Func::IttFrame, task, end, 0);
        }
    });
}

/// A marker, pause or resume: an instant (`id`: the marker's `__itt_id.d1`).
///
/// # Safety
/// Pointer arguments are null or what an ITT static part passes: objects made by a
/// `__itt_*_create` (ours or its own) and NUL-terminated names, alive for the process's life.
pub unsafe fn instant(func: Func, domain: *const IttDomain, name: *const IttStringHandle, id: u64) {
    let (domain, own) = domain_identity(domain);
    if own || !recorder::session::capturing() {
        return;
    }
    let name = handle_identity(name);
    let now = crate::clock::now();
    let task = OpenTask { start: now, name: name.id, domain: domain.id, id, ..OpenTask::default() };
    // An instant is written at once: without its names it is dropped (and counted).
    if !send_names_or_drop(&[&domain, &name]) {
        return;
    }
    if let Some(thread) = guard::current() {
        write_span(thread, func, task, now, 0);
    }
}

//! Process and thread identity over their lives: the process announces itself when it joins
//! (and again in every fork child), records the exit status it passes to `exit`, retires a
//! thread's lane when the thread exits, and passes through in a vfork child, which runs on its
//! parent's memory.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use mlprof_format::record::{Event, KIND_PROCESS_EXIT, KIND_PROCESS_START, PROC_FORKED};
use mlprof_format::ring::Claim;

use super::{lane, session};
use crate::clock;
use crate::guard::{self, ThreadState};
use crate::sys;

/// pthread key whose destructor retires the thread's lane; u32::MAX = none.
static LANE_KEY: AtomicU32 = AtomicU32::new(u32::MAX);

/// glibc keeps the values of keys below this (`PTHREAD_KEY_2NDLEVEL_SIZE`) in the thread's own
/// descriptor; a higher key's first value in a thread allocates a block with `calloc`, which
/// must not happen while claiming a lane (a preloaded malloc may be in the middle of its own
/// initialization, and call hooked functions, on this very thread).
const KEYS_WITHOUT_ALLOCATION: u32 = 32;

/// Announces the process image to the collector it just joined.
pub(super) fn announce_process() {
    send_process_start(0, false);
}

unsafe extern "C" {
    /// glibc's `on_exit`: like `atexit`, and the handler gets the exit status.
    fn on_exit(handler: extern "C" fn(libc::c_int, *mut c_void), arg: *mut c_void) -> libc::c_int;
}

/// Registers the fork, exit and thread-exit handlers, once per process image. Called by the
/// constructor, never from a hook: `pthread_atfork` allocates, and a hook may run inside a
/// preloaded malloc that holds its lock.
pub(super) fn register_process_hooks() {
    static DONE: AtomicBool = AtomicBool::new(false);
    if DONE.swap(true, Ordering::Relaxed) {
        return;
    }
    let mut key: libc::pthread_key_t = 0;
    // Safety: plain libc calls with valid arguments; done once per process image (atfork
    // handlers, keys and exit handlers are inherited by fork children).
    unsafe {
        if libc::pthread_key_create(&mut key, Some(retire_lane_at_thread_exit)) == 0 {
            LANE_KEY.store(key, Ordering::Relaxed);
        }
        libc::pthread_atfork(None, None, Some(after_fork_in_child));
        on_exit(exit_handler, core::ptr::null_mut());
    }
}

/// Set once this process image recorded its exit (so the exit hook and the exit handler do
/// not both record it).
static EXIT_RECORDED: AtomicBool = AtomicBool::new(false);

/// Runs when the process exits through `exit` or by returning from `main` (glibc's own call to
/// `exit`, which no hook sees); registered first, so it runs after the program's own handlers.
extern "C" fn exit_handler(status: libc::c_int, _arg: *mut c_void) {
    record_process_exit(status);
}

/// Registers the pthread-key destructor that retires a lane when its thread exits, where that
/// cannot allocate; otherwise the collector frees the lane once it sees the thread gone (its
/// liveness check, every 100 ms), which is only slower.
pub(super) fn remember_lane_for_thread_exit(index: u32) {
    let key = LANE_KEY.load(Ordering::Relaxed);
    if key < KEYS_WITHOUT_ALLOCATION {
        // Safety: the key was created by `register_process_hooks`; the value is an integer.
        unsafe { libc::pthread_setspecific(key, (index as usize + 1) as *const c_void) };
    }
}

extern "C" fn retire_lane_at_thread_exit(value: *mut c_void) {
    let Some(ring) = session::ring() else { return };
    let Some(thread) = guard::current() else { return };
    let index = (value as usize).wrapping_sub(1) as u32;
    if thread.lane.get() == index + 1 && thread.lane_owner.get() == session::identity() {
        if thread.in_flight.replace(false) {
            // Cancelled inside a recorded call, which never returned to write its record.
            ring.count_interrupted(index, 1);
        }
        ring.retire(Claim { index, generation: thread.lane_generation.get() });
        thread.lane.set(0);
        thread.lane_owner.set(0);
    }
}

extern "C" fn after_fork_in_child() {
    if !session::is_active_quick() {
        return;
    }
    let parent = session::replace_pid(sys::getpid());
    EXIT_RECORDED.store(false, Ordering::Relaxed);
    guard::with_guard(|_| send_process_start(parent, true));
}

/// Announces a child made by `_Fork`, which runs no atfork handlers.
pub fn after_raw_fork_in_child() {
    after_fork_in_child();
}

/// Announces this process image (command line, parent) to the collector.
fn send_process_start(parent: u32, forked: bool) {
    let Some(ring) = session::ring() else { return };
    let Some(thread) = guard::current() else { return };
    let pid = session::pid();
    let ppid = if forked { parent } else { sys::getppid() };
    let Some(lane) = lane::lane_of(ring, &thread, session::identity()) else {
        return;
    };
    let mut cmdline = [0u8; mlprof_format::record::MAX_STRING_BYTES];
    let len = sys::read_small_file("/proc/self/cmdline", &mut cmdline);
    let cmdline = cmdline.get(..len).unwrap_or_default();
    let id = mlprof_format::string_id(cmdline);
    if !lane::send_string(ring, lane, pid, thread.tid.get(), id, cmdline) {
        return;
    }
    ring.push(
        lane,
        &Event {
            kind: KIND_PROCESS_START,
            pid,
            tid: thread.tid.get(),
            start: clock::now(),
            arg: ppid as u64,
            arg2: id,
            extra: if forked { PROC_FORKED } else { 0 },
            ..Event::default()
        },
    );
}

/// Records the exit status a process passes to exit/_exit (once per process image).
pub fn record_process_exit(status: i32) {
    if !session::is_active_quick() {
        return;
    }
    if sys::getpid() != session::pid() {
        // A vfork child (which shares our memory, flags included) or a raw clone: not ours.
        return;
    }
    if EXIT_RECORDED.swap(true, Ordering::Relaxed) {
        return;
    }
    let Some(ring) = session::ring() else { return };
    let pid = session::pid();
    let _ = guard::with_guard(|thread| {
        if let Some(lane) = lane::lane_of(ring, &thread, session::identity()) {
            ring.push(
                lane,
                &Event {
                    kind: KIND_PROCESS_EXIT,
                    pid,
                    tid: thread.tid.get(),
                    start: clock::now(),
                    ret: status as i64,
                    ..Event::default()
                },
            );
        }
    });
}

/// After this thread called vfork: in the child (another pid, same memory) pass through; back in
/// the parent, clear the mark. Costs one getpid, only after a vfork.
#[cold]
pub(super) fn vfork_parent_resumed(state: &ThreadState) -> bool {
    if sys::getpid() == session::pid() {
        state.vfork_pending.set(false);
        true
    } else {
        false
    }
}

/// Marks the calling thread as having called vfork (see the `vfork` trampoline).
pub fn note_vfork() {
    if let Some(state) = guard::current() {
        state.vfork_pending.set(true);
    }
}

/// Remembers the CUDA device this thread selected (recorded on its later GPU calls).
pub fn set_thread_device(device: i32) {
    if let Some(state) = guard::current() {
        state.device.set(device);
    }
}

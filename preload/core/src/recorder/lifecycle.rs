//! Process and thread identity over their lives: the process joins its session and announces
//! itself (and again in every fork child), records the exit status it passes to `exit`, has a
//! thread's lane retired when the thread exits (the handlers are registered here, at start-up),
//! and passes through in a vfork child, which runs on its parent's memory.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use mlprof_format::record::{Event, KIND_PROCESS_EXIT, KIND_PROCESS_START, PROC_FORKED};

use super::{lane, session};
use crate::clock;
use crate::guard::{self, ThreadState};
use crate::sys;

/// Joins the session (see `session::join`, with the guard held), lanes backed by
/// `lane::back_lane`, and announces the process image to the collector when this call joined
/// it. Returns whether calls are recorded.
#[cold]
pub(super) fn join() -> bool {
    match session::join(lane::back_lane) {
        session::Join::JustJoined => {
            send_process_start(0, false);
            true
        }
        session::Join::Recording => true,
        session::Join::NotRecording => false,
    }
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
    lane::create_thread_exit_key();
    // Safety: plain libc calls with valid arguments; done once per process image (atfork
    // handlers and exit handlers are inherited by fork children).
    unsafe {
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
    // The rank its launcher gave it, read here because only the process sees its environment
    // for sure (a fork child inherits it: readers mark such children by their parent).
    if let Some(rank) = mlprof_format::rank::RankRecord::from_env(crate::config::getenv) {
        ring.push(lane, &Event { pid, tid: thread.tid.get(), start: clock::now(), ..rank.to_event() });
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

/// Work the library does first when its process exits (the GPU timeline's last flush, which
/// lies above the recorder): injected at start-up, as ITT stamping is; 0 when none.
static BEFORE_EXIT: AtomicUsize = AtomicUsize::new(0);

/// Makes `work` run once when the process exits, before its exit is recorded.
pub fn set_before_exit(work: fn()) {
    BEFORE_EXIT.store(work as usize, Ordering::Relaxed);
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
    let before = BEFORE_EXIT.load(Ordering::Relaxed);
    if before != 0 {
        // Safety: only set_before_exit stores here, the address of a `fn()`.
        unsafe { core::mem::transmute::<usize, fn()>(before)() };
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

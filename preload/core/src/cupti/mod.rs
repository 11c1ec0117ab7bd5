//! The GPU timeline of a process: CUPTI activity records (what each kernel, copy and memset
//! did on the GPU's own clock), collected from the process's first successful `cuInit` on and
//! sent through the ring from CUPTI's buffer callback ([`buffers`]).
//!
//! * [`library`]: finding libcupti (its major version the CUDA runtime's) and its entry points;
//! * [`records`]: CUPTI's record structs, read through their stable prefixes;
//! * [`buffers`]: the buffers CUPTI fills and what becomes of them;
//! * [`links`]: the subscriber callback that tells each call its correlation id;
//! * [`multi`]: the path on CUPTI 13.3's multi-subscriber `_v2` API (our own subscriber, which
//!   other `_v2` tools share CUPTI with); the v1 path here when that API is not offered or the
//!   driver refuses it.
//!
//! Started lazily, once per process ([`on_cuda_initialized`]), only in a process that records,
//! never in a fork child before it initializes CUDA itself (the state belongs to the pid that
//! started it). What happened is told to the collector as a state record
//! ([`GpuTimelineState`]): started, off, not found, a version mismatch, a failed CUPTI call, or
//! stood down (39: another tool holds CUPTI; said once on stderr too), and which API it runs on. Flushed periodically by
//! CUPTI's worker and at exit ([`flush_at_exit`]).
//!
//! Failure behaviour: any CUPTI failure leaves the process as it would be without mlprof's GPU
//! timeline (kinds enabled so far are disabled again); nothing here changes what a CUDA call
//! returns.

pub mod buffers;
pub mod library;
pub mod links;
pub mod multi;
pub mod options;
pub mod records;

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};

use mlprof_format::gpu::{ACTIVITY_STATE, GpuActivity, GpuTimelineState};

use crate::{clock, config, guard, recorder, sys};
use library::Api;

/// `CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED`: another tool holds CUPTI.
pub const MULTIPLE_SUBSCRIBERS: i32 = 39;
/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`: flush buffers not full yet too.
const FLUSH_FORCED: u32 = 1;
/// How often CUPTI's worker hands over buffers, ms: the GPU timeline lags the host by about
/// this much while the job runs.
const FLUSH_PERIOD_MS: u32 = 500;
/// The `Off` state's figure when nobody asked for the timeline (`MLPROF_CUPTI` unset).
const OFF_NOT_ASKED: u64 = 1;
/// The `Unlinked` state's figure when `MLPROF_CUPTI_LINKS=off` asked for no links (a CUPTI
/// status is never negative).
const LINKS_OFF: i32 = -2;

const IDLE: u8 = 0;
const STARTING: u8 = 1;
const STARTED: u8 = 2;
/// Tried, and there is no GPU timeline in this process (reported once).
const UNAVAILABLE: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(IDLE);
/// The process whose state `STATE` is (a fork child inherits its parent's memory, not its
/// CUPTI: it starts over).
static STATE_PID: AtomicU32 = AtomicU32::new(0);

/// The entry points, written once before `STATE` becomes `STARTED` (release), read after
/// seeing it (acquire).
struct ApiCell(UnsafeCell<Option<Api>>);
// Safety: written once by the one thread that moved STATE to STARTING, before the release
// store of STARTED; read only after an acquire load of STARTED.
unsafe impl Sync for ApiCell {}
static API: ApiCell = ApiCell(UnsafeCell::new(None));

/// Another tool of this process took CUPTI (its own subscriber or activity callbacks): the GPU
/// timeline does not start, or stood down.
static ANOTHER_TOOL: AtomicBool = AtomicBool::new(false);

/// The entry points, if this process's GPU timeline is running.
fn api() -> Option<Api> {
    if STATE.load(Ordering::Acquire) != STARTED || STATE_PID.load(Ordering::Relaxed) != sys::getpid() {
        return None;
    }
    // Safety: see ApiCell.
    unsafe { *API.0.get() }
}

/// CUDA is up in this process (a `cuInit` returned success): starts the GPU timeline the first
/// time, in a process that records. Runs CUPTI and the loader with the guard held (their calls
/// are ours, not the application's).
pub fn on_cuda_initialized() {
    let pid = sys::getpid();
    if STATE.load(Ordering::Relaxed) != IDLE && STATE_PID.load(Ordering::Relaxed) == pid {
        return;
    }
    if !recorder::session::is_active_quick() {
        // No session yet (attach mode, the collector not started): the first recorded GPU call
        // of this process, once it joined one, starts the timeline.
        PENDING_PID.store(pid, Ordering::Relaxed);
        return;
    }
    let Some(thread) = guard::current() else { return };
    thread.foreign(|| guard::keeping_errno(|| start(pid)));
}

/// The process whose CUDA started before it joined a session (0: none).
static PENDING_PID: AtomicU32 = AtomicU32::new(0);

/// From each recorded GPU call (one relaxed load): starts the timeline of a process whose CUDA
/// started before it joined its session, on its first recorded GPU call after joining, before
/// the call's real work (a fork child's is not its own: its pid differs).
#[inline(always)]
pub fn start_if_pending() {
    if PENDING_PID.load(Ordering::Relaxed) != 0 {
        start_pending();
    }
}

#[cold]
fn start_pending() {
    if PENDING_PID.load(Ordering::Relaxed) != recorder::session::pid() {
        return;
    }
    PENDING_PID.store(0, Ordering::Relaxed);
    on_cuda_initialized();
}

fn start(pid: u32) {
    if STATE_PID.load(Ordering::Relaxed) != pid {
        // A fork child (one thread: no race): its parent's state is not its own.
        STATE.store(IDLE, Ordering::Relaxed);
        buffers::reset_totals();
        multi::forget();
    }
    if STATE.compare_exchange(IDLE, STARTING, Ordering::Acquire, Ordering::Relaxed).is_err() {
        return;
    }
    STATE_PID.store(pid, Ordering::Relaxed);
    match try_start() {
        Ok(version) => {
            STATE.store(STARTED, Ordering::Release);
            report(GpuTimelineState::Started, u64::from(version));
        }
        Err((state, code)) => {
            STATE.store(UNAVAILABLE, Ordering::Release);
            if state == GpuTimelineState::StoodDown {
                say_stood_down();
            }
            report(state, code);
        }
    }
}

/// Loads CUPTI, publishes its entry points for the callbacks, and turns collection on;
/// returns CUPTI's API version, or why there is no GPU timeline.
fn try_start() -> Result<u32, library::Unavailable> {
    // Opt-in (`mlprof-collect --gpu-timeline` sets `on`): on a launch-bound loop it cost more
    // than its target (BENCHMARKS.md, "GPU timeline").
    let configured = config::getenv(c"MLPROF_CUPTI");
    match configured {
        None | Some(b"") => return Err((GpuTimelineState::Off, OFF_NOT_ASKED)),
        Some(b"off" | b"0" | b"no") => return Err((GpuTimelineState::Off, 0)),
        Some(_) => {}
    }
    if ANOTHER_TOOL.load(Ordering::Relaxed) {
        // Its activity callbacks are process-wide: registering ours would take its records.
        return Err((GpuTimelineState::StoodDown, 0));
    }
    let (api, version) = library::load(configured.filter(|path| !matches!(*path, b"on" | b"1" | b"yes")))?;
    let options = options::read();
    // Safety: see ApiCell: only this thread writes, while STATE is STARTING, before CUPTI can
    // call back (the callbacks are registered below).
    unsafe { *API.0.get() = Some(api) };
    match multi::subscribe(&api, version) {
        Ok((v2, subscriber)) => return multi::start(&api, &v2, subscriber, &options).map(|()| version),
        Err(0) => {}
        // A driver older than r610, most likely: one subscriber, as before 13.3.
        Err(refused) => report(GpuTimelineState::SingleSubscriber, refused as u32 as u64),
    }
    // Safety: a CUPTI entry point given a function of the prototype it expects.
    let stamped = options.timestamp_callback
        && api.register_timestamp.is_some_and(|register| unsafe { register(timestamp) } == 0);
    if !stamped {
        // Safety: a valid out pointer.
        let residual = calibrate(|now| unsafe { (api.get_timestamp)(now) });
        report(GpuTimelineState::Calibrated, u64::from(residual));
    }
    // Safety: as above, the two buffer callbacks of cupti_activity.h's prototypes.
    let status = unsafe { (api.register_callbacks)(buffers::buffer_requested, buffer_completed) };
    if status != 0 {
        return Err((GpuTimelineState::Failed, status as u64));
    }
    let kinds = options.kinds.as_slice();
    for (enabled, kind) in kinds.iter().enumerate() {
        // Safety: a CUPTI entry point given a kind number of cupti_activity.h.
        let status = unsafe { (api.enable)(*kind) };
        if status != 0 {
            disable(&api, kinds.get(..enabled).unwrap_or_default());
            return Err(unavailable(status));
        }
    }
    let linked = if options.links { links::subscribe(&api) } else { LINKS_OFF };
    if linked == MULTIPLE_SUBSCRIBERS {
        disable(&api, kinds);
        return Err(unavailable(linked));
    }
    if linked != 0 {
        report(GpuTimelineState::Unlinked, linked as u32 as u64);
    }
    if let Some(period) = api.flush_period {
        // Safety: a CUPTI entry point given a period in ms.
        unsafe { period(FLUSH_PERIOD_MS) };
    }
    Ok(version)
}

/// Turns `kinds` off again.
fn disable(api: &Api, kinds: &[u32]) {
    for kind in kinds {
        // Safety: a CUPTI entry point given a kind number of cupti_activity.h (one not enabled
        // is refused, harmlessly).
        unsafe { (api.disable)(*kind) };
    }
}

/// A CUPTI call failed with `status`: another tool holds CUPTI (39), or CUPTI cannot work here.
fn unavailable(status: i32) -> library::Unavailable {
    let state =
        if status == MULTIPLE_SUBSCRIBERS { GpuTimelineState::StoodDown } else { GpuTimelineState::Failed };
    (state, status as u32 as u64)
}

/// CUPTI's timestamp callback: records stamped with the ring's own clock, converted by the
/// collector like every other record.
unsafe extern "C" fn timestamp() -> u64 {
    clock::now()
}

/// Without our timestamp callback: the offset from CUPTI's clock (`read`: a CUPTI timestamp
/// into its argument, and its status) to CLOCK_MONOTONIC, from the tightest of 100 brackets
/// `monotonic, cupti, monotonic`; returns the residual (half the tightest bracket, ns).
/// Records then carry monotonic ns (flagged).
fn calibrate(read: impl Fn(&mut u64) -> i32) -> u32 {
    let mut best = (u64::MAX, 0u64);
    for _ in 0..100 {
        let before = clock::monotonic_ns();
        let mut cupti = 0;
        let status = read(&mut cupti);
        let after = clock::monotonic_ns();
        let width = after.saturating_sub(before);
        if status == 0 && width < best.0 {
            best = (width, (before + width / 2).wrapping_sub(cupti));
        }
    }
    if best.0 == u64::MAX {
        return u32::MAX;
    }
    buffers::use_calibration(best.1);
    (best.0 / 2).min(u32::MAX as u64) as u32
}

/// `bufferCompleted`, as CUPTI calls it.
unsafe extern "C" fn buffer_completed(
    context: *mut c_void,
    stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    let Some(api) = api_for_callback() else {
        // Not ours to read; the memory is still ours to give back.
        buffers::release(buffer);
        return;
    };
    let reader = CuptiReader(api);
    // Safety: CUPTI hands back a buffer buffer_requested mapped, `valid` bytes filled.
    unsafe { buffers::buffer_completed(&reader, context, stream, buffer, valid) };
}

/// The entry points for a buffer callback, which CUPTI may make while starting already (inside
/// `cuptiActivityEnable`), from any thread; the cell was written before the callbacks were
/// registered. A process whose start failed afterwards still turns in its buffers; a fork child
/// with its parent's CUPTI in its memory does not (one system call a buffer): its timeline is
/// not its own until it initializes CUDA itself.
fn api_for_callback() -> Option<Api> {
    if STATE.load(Ordering::Acquire) == IDLE || STATE_PID.load(Ordering::Relaxed) != sys::getpid() {
        return None;
    }
    // Safety: see ApiCell; written before CUPTI knew of the callback that reads it.
    unsafe { *API.0.get() }
}

struct CuptiReader(Api);

impl buffers::Reader for CuptiReader {
    fn next(&self, buffer: *mut u8, valid: usize, previous: *mut u8) -> Option<*mut u8> {
        let mut record = previous;
        // Safety: CUPTI walks its own buffer from `record` (null: the first).
        let status = unsafe { (self.0.next_record)(buffer, valid, &mut record) };
        (status == 0 && !record.is_null()).then_some(record)
    }

    fn dropped(&self, context: *mut c_void, stream: u32) -> u64 {
        let mut dropped = 0usize;
        // Safety: the context and stream CUPTI named for this buffer; a valid out pointer.
        let status = unsafe { (self.0.dropped)(context, stream, &mut dropped) };
        if status == 0 { dropped as u64 } else { 0 }
    }
}

/// Another tool of this process is taking CUPTI (`cuptiSubscribe` or
/// `cuptiActivityRegisterCallbacks` called by torch.profiler's Kineto, or by any CUPTI client),
/// before the call reaches CUPTI: the GPU timeline hands over what CUPTI holds of it, turns its
/// kinds and callbacks off, and stands down for good in this process, said once; the tool then
/// has CUPTI as it would without mlprof.
pub fn another_tool_takes_cupti() {
    if guard::current().is_some_and(|thread| thread.in_hook.get() && thread.internal.get()) {
        // Our own start or flush (should CUPTI call its own entry points through the PLT).
        return;
    }
    ANOTHER_TOOL.store(true, Ordering::Relaxed);
    let Some(api) = api() else { return };
    if STATE.compare_exchange(STARTED, UNAVAILABLE, Ordering::AcqRel, Ordering::Relaxed).is_err() {
        return;
    }
    let Some(thread) = guard::current() else { return };
    thread.foreign(|| {
        guard::keeping_errno(|| {
            if multi::active() {
                multi::stand_down(&api);
                return;
            }
            links::set_linking(false);
            links::unsubscribe(&api);
            // Safety: a CUPTI entry point; our buffer callback still reads (the API stays).
            unsafe { (api.flush_all)(FLUSH_FORCED) };
            disable(&api, options::all_kinds().as_slice());
        })
    });
    say_stood_down();
    report(GpuTimelineState::StoodDown, 0);
}

/// Another tool subscribes through `cuptiSubscribe_v2`, before the call reaches CUPTI. One that
/// asks for multiple subscribers shares CUPTI with our `_v2` subscriber, or with the one we
/// make later: mlprof keeps its timeline. One that asks for a single subscriber, or one that
/// comes while our timeline holds CUPTI through the v1 API (which no `_v2` subscriber can
/// share), takes CUPTI as [`another_tool_takes_cupti`] says.
pub fn another_tool_subscribes_v2(allows_multiple: bool) {
    let on_v1 = api().is_some() && !multi::active();
    if allows_multiple && !on_v1 {
        return;
    }
    another_tool_takes_cupti();
}

/// At exit (`exit`, `_exit`, the last thread's return): CUPTI hands over every buffer, full or
/// not, so the last kernels reach the collector. With the guard held by the caller (marked
/// internal: the callback writes from inside the flush).
pub fn flush_at_exit() {
    let Some(api) = api() else { return };
    let Some(thread) = guard::current() else { return };
    // Safety: a CUPTI entry point; the callback runs on this thread or CUPTI's before it returns.
    thread.foreign(|| guard::keeping_errno(|| unsafe { (api.flush_all)(FLUSH_FORCED) }));
}

/// Tells the collector the timeline's `state`, with its one figure (see `GpuTimelineState`).
fn report(state: GpuTimelineState, value: u64) {
    buffers::send_state(GpuActivity {
        what: ACTIVITY_STATE,
        detail: state as u8,
        value,
        ..GpuActivity::default()
    });
}

fn say_stood_down() {
    let mut digits = [0u8; 10];
    sys::log_line(&[
        b"mlprof: pid ",
        config::format_u32(sys::getpid(), &mut digits),
        b": another tool holds CUPTI (torch.profiler, Nsight Systems, ncu, compute-sanitizer): no GPU timeline for this process",
    ]);
}

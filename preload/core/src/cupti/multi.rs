//! The GPU timeline on CUPTI 13.3's multi-subscriber API (`cuptiSubscribe_v2` with multiple
//! subscribers allowed, CUPTI 13.3+ and driver r610+): our own subscriber, with our activity
//! kinds, buffer callbacks and API callbacks bound to it, so that another tool that subscribes
//! the same way (a `_v2` client asking for multiple subscribers) traces beside mlprof and
//! mlprof keeps its timeline.
//!
//! What it cannot share (CUPTI's documentation, "Multiple Subscribers"): the unversioned (v1)
//! API. A process that mixes v1 and `_v2` calls gets `CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED`,
//! so a v1 client (today's torch.profiler, Nsight, a sanitizer) still makes mlprof stand down
//! first (`super::another_tool_takes_cupti`), as does a `_v2` client that asks for a single
//! subscriber. For the same reason this path makes no v1 call but `cuptiActivityFlushAll` and
//! `cuptiEnableCallback` / `cuptiUnsubscribe` (the documented `_v2` workflow uses them; they have
//! no `_v2`), and sets none of CUPTI's process-wide settings: no flush period (CUPTI hands over a
//! buffer when full, and at our flushes), no timestamp callback (per subscriber only from CUPTI
//! 13.4; before, one callback for every subscriber: it would move the other tool's times), so
//! CUPTI's clock is calibrated onto the run's.
//!
//! When `cuptiSubscribe_v2` is refused (a driver older than r610; which error it then gives is
//! not documented), or CUPTI cannot give a subscriber's timestamp, nothing of ours is left
//! subscribed and the v1 path runs as before this API existed.

use core::ffi::c_void;
use core::sync::atomic::{AtomicPtr, Ordering};

use mlprof_format::gpu::GpuTimelineState;

use super::library::{self, Api, SubscriberParams, V2Api};
use super::options::Options;
use super::{FLUSH_FORCED, LINKS_OFF, buffers, links, report};

/// Our subscriber while the timeline runs on this path (null: it does not).
static SUBSCRIBER: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// Whether the timeline of this process runs on the multi-subscriber path.
pub fn active() -> bool {
    !SUBSCRIBER.load(Ordering::Acquire).is_null()
}

/// A fork child starts over: its parent's subscriber is not its own.
pub fn forget() {
    SUBSCRIBER.store(core::ptr::null_mut(), Ordering::Relaxed);
}

/// Subscribes with multiple subscribers allowed, when this CUPTI is 13.3+ and offers the whole
/// `_v2` API; our subscriber, or the status of the refused call (0: not offered), after which
/// nothing of ours is subscribed.
pub fn subscribe(api: &Api, version: u32) -> Result<(V2Api, *mut c_void), i32> {
    let (Some(v2), Some(unsubscribe)) = (api.v2, api.unsubscribe) else { return Err(0) };
    if version < library::MULTI_SUBSCRIBER_VERSION {
        return Err(0);
    }
    let mut params = SubscriberParams {
        struct_size: library::SUBSCRIBER_PARAMS_SIZE,
        name: c"mlprof".as_ptr(),
        old_name: core::ptr::null_mut(),
        old_name_size: 0,
        allow_multiple: 1,
    };
    let mut subscriber = core::ptr::null_mut();
    // Safety: CUPTI's cuptiSubscribe_v2 given a valid out pointer, a callback of its prototype
    // (it only reads what CUPTI passes), no user data, and params of the size they state.
    let status = unsafe {
        (v2.subscribe)(&mut subscriber, Some(links::api_entered), core::ptr::null_mut(), &mut params)
    };
    if status != 0 {
        return Err(status);
    }
    let mut now = 0;
    // Safety: our live subscriber and a valid out pointer. A CUPTI that cannot stamp for a
    // subscriber is not one this path can calibrate against: back to v1.
    let status = unsafe { (v2.get_timestamp)(subscriber, &mut now) };
    if status != 0 {
        // Safety: the subscriber just made, given back once.
        unsafe { unsubscribe(subscriber) };
        return Err(status);
    }
    Ok((v2, subscriber))
}

/// Turns collection on for `subscriber`: calibration, buffer callbacks, kinds, API callbacks.
/// On failure our subscriber is given back (the kinds enabled so far disabled first).
pub(super) fn start(
    api: &Api,
    v2: &V2Api,
    subscriber: *mut c_void,
    options: &Options,
) -> Result<(), library::Unavailable> {
    let residual = super::calibrate(|now| {
        // Safety: our live subscriber and a valid out pointer.
        unsafe { (v2.get_timestamp)(subscriber, now) }
    });
    report(GpuTimelineState::Calibrated, u64::from(residual));
    // Published before CUPTI can call back (inside the registration or an enable).
    SUBSCRIBER.store(subscriber, Ordering::Release);
    // Safety: our subscriber and the two buffer callbacks of cupti_activity.h's `_v2` prototypes.
    let status = unsafe { (v2.register_callbacks)(subscriber, buffer_requested, buffer_completed) };
    if status != 0 {
        give_back(api, v2, &[]);
        return Err(super::unavailable(status));
    }
    let kinds = options.kinds.as_slice();
    for (enabled, kind) in kinds.iter().enumerate() {
        // Safety: our subscriber, a kind number of cupti_activity.h, no field selection.
        let status = unsafe { (v2.enable)(subscriber, *kind, core::ptr::null_mut()) };
        if status != 0 {
            give_back(api, v2, kinds.get(..enabled).unwrap_or_default());
            return Err(super::unavailable(status));
        }
    }
    let linked = if options.links { links::enable_on(api, subscriber) } else { LINKS_OFF };
    if linked != 0 {
        report(GpuTimelineState::Unlinked, linked as u32 as u64);
    }
    report(GpuTimelineState::MultiSubscriber, 0);
    Ok(())
}

/// Another tool takes CUPTI in a way that cannot share it with our subscriber: CUPTI hands over
/// what it holds of ours, our kinds go off, and our subscriber is given back (so that the
/// tool's call finds CUPTI as it would without mlprof).
pub fn stand_down(api: &Api) {
    let Some(v2) = api.v2 else { return };
    links::set_linking(false);
    // Before unsubscribing: no buffer of ours may outlive the handle it is read with.
    // Safety: a CUPTI entry point; our buffer callback reads meanwhile.
    unsafe { (api.flush_all)(FLUSH_FORCED) };
    give_back(api, &v2, super::options::all_kinds().as_slice());
}

/// Disables `kinds` on our subscriber and unsubscribes it.
fn give_back(api: &Api, v2: &V2Api, kinds: &[u32]) {
    let subscriber = SUBSCRIBER.swap(core::ptr::null_mut(), Ordering::AcqRel);
    if subscriber.is_null() {
        return;
    }
    for kind in kinds {
        // Safety: our subscriber, a kind of cupti_activity.h (one not enabled is refused,
        // harmlessly).
        unsafe { (v2.disable)(subscriber, *kind, core::ptr::null_mut()) };
    }
    if let Some(unsubscribe) = api.unsubscribe {
        // Safety: the subscriber cuptiSubscribe_v2 made, given back once (swapped out above).
        unsafe { unsubscribe(subscriber) };
    }
}

/// `bufferRequested` of our subscriber: the same buffers as the v1 path's.
unsafe extern "C" fn buffer_requested(
    buffer: *mut *mut u8,
    size: *mut usize,
    max: *mut usize,
    _info: *mut c_void,
) {
    // Safety: CUPTI's out parameters, passed on.
    unsafe { buffers::buffer_requested(buffer, size, max) };
}

/// `bufferCompleted` of our subscriber: its records read with our subscriber's handle; a
/// buffer that comes after we gave the subscriber back is only unmapped.
unsafe extern "C" fn buffer_completed(buffer: *mut u8, _size: usize, valid: usize, _info: *mut c_void) {
    let subscriber = SUBSCRIBER.load(Ordering::Acquire);
    let Some(v2) = super::api_for_callback().and_then(|api| api.v2).filter(|_| !subscriber.is_null()) else {
        buffers::release(buffer);
        return;
    };
    let reader = Reader { v2, subscriber };
    // Safety: CUPTI hands back a buffer buffer_requested mapped, `valid` bytes filled.
    unsafe { buffers::buffer_completed(&reader, core::ptr::null_mut(), 0, buffer, valid) };
}

struct Reader {
    v2: V2Api,
    subscriber: *mut c_void,
}

impl buffers::Reader for Reader {
    fn next(&self, buffer: *mut u8, valid: usize, previous: *mut u8) -> Option<*mut u8> {
        let mut record = previous;
        // Safety: CUPTI walks its own buffer from `record` (null: the first), for our subscriber.
        let status = unsafe { (self.v2.next_record)(self.subscriber, buffer, valid, &mut record) };
        (status == 0 && !record.is_null()).then_some(record)
    }

    fn dropped(&self, _context: *mut c_void, _stream: u32) -> u64 {
        let Some(dropped) = self.v2.dropped else { return 0 };
        let mut count = 0usize;
        // Safety: our subscriber; no context and stream 0 (a `_v2` buffer names neither) ask
        // for the subscriber's drops; a valid out pointer.
        let status = unsafe { dropped(self.subscriber, core::ptr::null_mut(), 0, &mut count) };
        if status == 0 { count as u64 } else { 0 }
    }
}

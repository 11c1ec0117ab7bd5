//! Linking GPU work to the host call that issued it: CUPTI gives each CUDA API call a
//! correlation id, carried by the kernels, copies and memsets the call issued. A subscriber
//! callback at the entry of the calls that issue work (launches, copies, memsets, runtime and
//! driver, the ones the hooks record) tells the calling thread its id, which the hook
//! (`crate::gpu`) puts in its record.
//!
//! Before CUPTI 13.3 a process has one subscriber: `cuptiSubscribe` answering 39 means another
//! tool (Nsight Systems, ncu, compute-sanitizer) holds CUPTI, and the GPU timeline stands down.
//! On CUPTI 13.3's multi-subscriber path the one subscriber `cuptiSubscribe_v2` made carries
//! both our activities and these callbacks (`super::multi`).

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use super::library::Api;

/// `CUPTI_CB_DOMAIN_DRIVER_API`, `CUPTI_CB_DOMAIN_RUNTIME_API`.
const DRIVER_API: u32 = 1;
const RUNTIME_API: u32 = 2;

/// Runtime callback ids (cupti_runtime_cbid.h) of the launches, copies and memsets recorded:
/// cudaLaunchKernel (+_ptsz), cudaLaunchCooperativeKernel (+_ptsz), cudaLaunchKernelExC
/// (+_ptsz); cudaMemcpy, cudaMemcpy2D, cudaMemcpyAsync and their per-thread forms; cudaMemset,
/// cudaMemsetAsync and theirs.
const RUNTIME_IDS: [u32; 16] = [211, 214, 269, 270, 430, 431, 31, 32, 41, 215, 216, 225, 49, 51, 233, 235];
/// Driver callback ids (cupti_driver_cbid.h): cuLaunchKernel, cuLaunchKernelEx (+_ptsz); every
/// cuMemcpy* the hooks wrap, legacy, `_v2` and per-thread.
const DRIVER_IDS: [u32; 27] = [
    307, 442, 652, 653, 43, 45, 47, 60, 62, 64, 248, 276, 277, 278, 279, 280, 281, 305, 306, 397, 398, 399,
    408, 418, 421, 422, 423,
];

/// `CUpti_CallbackData`: `callbackSite` (0 = API_ENTER) at 0, `correlationId` at 64.
const SITE_OFFSET: usize = 0;
const CORRELATION_OFFSET: usize = 64;

/// Whether CUPTI's callback tells this process's threads the correlation id of their CUDA
/// calls (set once subscribed; off when the GPU timeline stands down).
static LINKING: AtomicBool = AtomicBool::new(false);

/// Whether calls take their correlation ids (`crate::gpu`'s hooks ask at each launch, copy or
/// memset).
#[inline(always)]
pub fn linking() -> bool {
    LINKING.load(Ordering::Relaxed)
}

/// Turns the taking of correlation ids on or off.
pub fn set_linking(on: bool) {
    LINKING.store(on, Ordering::Relaxed);
}

/// At the entry of a CUDA API call on this thread: the call's correlation id, kept unless an
/// outer call's is there already (a driver call made inside a runtime call: the GPU work
/// carries the runtime call's id). The hook that started the call takes it (`crate::gpu`).
fn note_correlation(correlation: u32) {
    if let Some(thread) = crate::guard::current()
        && thread.gpu_correlation.get() == 0
    {
        thread.gpu_correlation.set(correlation);
    }
}

/// Our subscriber, once subscribed (null: none).
static SUBSCRIBER: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// Gives CUPTI's one subscriber slot back (another tool wants it).
pub fn unsubscribe(api: &Api) {
    let subscriber = SUBSCRIBER.swap(core::ptr::null_mut(), Ordering::AcqRel);
    if let (false, Some(unsubscribe)) = (subscriber.is_null(), api.unsubscribe) {
        // Safety: the subscriber `subscribe` made, given back once (swapped out above).
        unsafe { unsubscribe(subscriber) };
    }
}

/// Subscribes and enables the callbacks; the subscription's result (0: linked).
pub fn subscribe(api: &Api) -> i32 {
    let Some(subscribe) = api.subscribe else { return -1 };
    if api.enable_callback.is_none() {
        return -1;
    }
    let mut subscriber: *mut c_void = core::ptr::null_mut();
    // Safety: a CUPTI entry point given a valid out pointer and a callback of its prototype.
    let status = unsafe { subscribe(&mut subscriber, api_entered, core::ptr::null_mut()) };
    if status != 0 {
        return status;
    }
    SUBSCRIBER.store(subscriber, Ordering::Release);
    enable_on(api, subscriber)
}

/// Enables the callbacks of the calls that issue GPU work on `subscriber` (ours: made by
/// [`subscribe`], or by `cuptiSubscribe_v2` with [`api_entered`] as its callback); 0 when
/// calls are linked from now on, -1 when this CUPTI has no `cuptiEnableCallback`.
pub(super) fn enable_on(api: &Api, subscriber: *mut c_void) -> i32 {
    let Some(enable) = api.enable_callback else { return -1 };
    let ids = RUNTIME_IDS.iter().map(|id| (RUNTIME_API, *id));
    let ids = ids.chain(DRIVER_IDS.iter().map(|id| (DRIVER_API, *id)));
    for (domain, id) in ids {
        // Safety: our live subscriber, a domain and id of CUPTI's headers. A refused id (a
        // CUPTI that does not know it) only leaves that call unlinked.
        unsafe { enable(1, subscriber, domain, id) };
    }
    set_linking(true);
    0
}

/// The subscriber callback: at the entry of an enabled API call, its correlation id goes to the
/// calling thread.
///
/// # Safety
/// As CUPTI calls it: `data` null or a `CUpti_CallbackData` of an API domain.
pub unsafe extern "C" fn api_entered(_user: *mut c_void, _domain: u32, _id: u32, data: *const u8) {
    if data.is_null() {
        return;
    }
    // Safety: CUPTI passes a CUpti_CallbackData (at least 68 bytes) for API domains.
    let (site, correlation) = unsafe {
        (
            (data.add(SITE_OFFSET) as *const u32).read_unaligned(),
            (data.add(CORRELATION_OFFSET) as *const u32).read_unaligned(),
        )
    };
    if site == 0 && correlation != 0 {
        note_correlation(correlation);
    }
}

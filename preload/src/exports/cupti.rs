//! The CUPTI entry points by which another tool takes CUPTI: torch.profiler's Kineto (its
//! references bind here first, as every library's do to a preloaded definition), Nsight's
//! injection library, a user's own CUPTI code. Before CUPTI 13.3 a process has one subscriber
//! and one pair of activity buffer callbacks, so mlprof's GPU timeline stands down first
//! (`mlprof_preload_core::cupti::another_tool_takes_cupti`), then the call goes on to CUPTI
//! unchanged and its result is returned as is. CUPTI 13.3's multi-subscriber API does not
//! change that for these v1 calls (CUPTI refuses v1 calls beside a `_v2` subscriber); a tool's
//! `cuptiSubscribe_v2` that asks for multiple subscribers shares CUPTI with ours instead
//! (`another_tool_subscribes_v2`). No call is recorded.

#![allow(non_snake_case)]

use core::ffi::{c_int, c_void};

use crate::gpu::real_slot;
use crate::real::as_fn;

/// `CUPTI_ERROR_NOT_INITIALIZED`: what a call gets when no libcupti can be found to pass it to
/// (a program cannot call CUPTI without one loaded, so this is never seen in practice).
const NO_CUPTI: c_int = 15;
/// `CUPTI_ERROR_NOT_SUPPORTED`: what `cuptiSubscribe_v2` answers when the CUPTI loaded has none
/// (a tool that finds this export instead of a missing one: XLA and JAX then take their v1
/// path, as they would have).
const NOT_SUPPORTED: c_int = 27;

real_slot!(cuptiSubscribe, crate::real::CUPTI);
/// `CUptiResult cuptiSubscribe(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuptiSubscribe(
    handle: *mut *mut c_void,
    callback: *mut c_void,
    user: *mut c_void,
) -> c_int {
    mlprof_preload_core::cupti::another_tool_takes_cupti();
    let Some(addr) = cuptiSubscribe::REAL.get() else { return NO_CUPTI };
    // Safety: CUPTI's cuptiSubscribe, of this prototype, given the caller's arguments.
    unsafe {
        as_fn::<unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *mut c_void) -> c_int>(addr)(
            handle, callback, user,
        )
    }
}

real_slot!(cuptiActivityRegisterCallbacks, crate::real::CUPTI);
/// `CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc,
/// CUpti_BuffersCallbackCompleteFunc)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuptiActivityRegisterCallbacks(
    requested: *mut c_void,
    completed: *mut c_void,
) -> c_int {
    mlprof_preload_core::cupti::another_tool_takes_cupti();
    let Some(addr) = cuptiActivityRegisterCallbacks::REAL.get() else { return NO_CUPTI };
    // Safety: CUPTI's cuptiActivityRegisterCallbacks, of this prototype, given the caller's
    // arguments.
    unsafe { as_fn::<unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int>(addr)(requested, completed) }
}

real_slot!(cuptiSubscribe_v2, crate::real::CUPTI);
/// `CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*,
/// CUpti_SubscriberParams*)` (CUPTI 13.2+).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuptiSubscribe_v2(
    handle: *mut *mut c_void,
    callback: *mut c_void,
    user: *mut c_void,
    params: *mut c_void,
) -> c_int {
    // Safety: the caller's params, null or of the size they state, as CUPTI requires; only read.
    let shares = unsafe { mlprof_preload_core::cupti::library::allows_multiple(params as *const u8) };
    mlprof_preload_core::cupti::another_tool_subscribes_v2(shares);
    let Some(addr) = cuptiSubscribe_v2::REAL.get() else { return NOT_SUPPORTED };
    // Safety: CUPTI's cuptiSubscribe_v2, of this prototype, given the caller's arguments.
    unsafe {
        as_fn::<unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *mut c_void, *mut c_void) -> c_int>(addr)(
            handle, callback, user, params,
        )
    }
}

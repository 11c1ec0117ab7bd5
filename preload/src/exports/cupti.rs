//! The CUPTI entry points by which another tool takes CUPTI: torch.profiler's Kineto (its
//! references bind here first, as every library's do to a preloaded definition), Nsight's
//! injection library, a user's own CUPTI code. Before CUPTI 13.3 a process has one subscriber
//! and one pair of activity buffer callbacks, so mlprof's GPU timeline stands down first
//! (`mlprof_preload_core::cupti::another_tool_takes_cupti`), then the call goes on to CUPTI
//! unchanged and its result is returned as is. Neither call is recorded.

#![allow(non_snake_case)]

use core::ffi::{c_int, c_void};

use crate::gpu::real_slot;
use crate::real::as_fn;

/// `CUPTI_ERROR_NOT_INITIALIZED`: what a call gets when no libcupti can be found to pass it to
/// (a program cannot call CUPTI without one loaded, so this is never seen in practice).
const NO_CUPTI: c_int = 15;

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

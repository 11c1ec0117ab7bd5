//! What the GPU hooks share: recording a call as a [`GpuCall`], marking driver calls made from
//! inside runtime calls as nested, naming kernels once per function, and, while the GPU
//! timeline runs, taking the CUPTI correlation id of each call that issues GPU work.

use core::ffi::{c_char, c_int, c_void};

use mlprof_format::func::{Class, Func};
use mlprof_format::record::GpuCall;

use crate::cupti;
use crate::guard::ThreadState;
use crate::real::{CUDA_DRIVER, CUDA_RUNTIME, Real, as_fn};
use crate::recorder::Span;

/// A call that issues GPU work (launch, copy, memset), made outside any other recorded CUDA
/// call, while linking is on: its correlation id is forgotten before the real call, so that
/// what CUPTI's callback notes during the call is this call's. `func` is a constant at every
/// caller: the class test folds away.
#[inline(always)]
fn starts_link(func: Func, thread: &ThreadState) -> bool {
    let issues_work = matches!(func.class(), Class::Launch | Class::Copy | Class::Memset);
    if issues_work && thread.gpu_depth.get() == 0 && cupti::links::linking() {
        thread.gpu_correlation.set(0);
        return true;
    }
    false
}

/// The correlation id CUPTI noted during a call that [`starts_link`]ed (0 otherwise, or when
/// CUPTI's callback did not run).
#[inline(always)]
fn take_link(linked: bool, thread: &ThreadState) -> u32 {
    if linked { thread.gpu_correlation.replace(0) } else { 0 }
}

/// Status returned when the real function cannot be found (cudaErrorInitializationError,
/// CUDA_ERROR_NOT_INITIALIZED, ncclInternalError all happen to be 3).
pub const NOT_FOUND_STATUS: c_int = 3;

/// Records an outer API call (CUDA runtime, NCCL): driver calls made inside it are nested.
#[inline(always)]
pub fn outer_call(func: Func, call: impl FnOnce() -> c_int, fields: impl FnOnce(c_int) -> GpuCall) -> c_int {
    let Some(span) = Span::begin(func) else { return call() };
    cupti::start_if_pending();
    let thread = span.thread();
    let linked = starts_link(func, thread);
    thread.gpu_depth.set(thread.gpu_depth.get() + 1);
    let status = call();
    let end = crate::clock::now();
    let thread = span.thread();
    thread.gpu_depth.set(thread.gpu_depth.get().saturating_sub(1));
    let correlation = take_link(linked, thread);
    span.finish_gpu(end, GpuCall { status, ..fields(status) }, func, status != 0, correlation);
    status
}

/// Records a CUDA driver call.
#[inline(always)]
pub fn driver_call(func: Func, call: impl FnOnce() -> c_int, fields: impl FnOnce(c_int) -> GpuCall) -> c_int {
    let Some(span) = Span::begin(func) else { return call() };
    cupti::start_if_pending();
    let linked = starts_link(func, span.thread());
    let status = call();
    let end = crate::clock::now();
    let correlation = take_link(linked, span.thread());
    span.finish_gpu(end, GpuCall { status, ..fields(status) }, func, status != 0, correlation);
    status
}

/// Records a launch of kernel `handle`, naming the kernel the first time this process
/// launches it.
#[inline(always)]
pub fn launch_call(
    func: Func,
    handle: u64,
    name: fn(u64, &mut [u8]) -> usize,
    call: impl FnOnce() -> c_int,
    fields: impl FnOnce(c_int) -> GpuCall,
) -> c_int {
    let Some(span) = Span::begin(func) else { return call() };
    cupti::start_if_pending();
    let runtime = func.api() == mlprof_format::func::Api::CudaRuntime;
    let thread = span.thread();
    let linked = starts_link(func, thread);
    if runtime {
        thread.gpu_depth.set(thread.gpu_depth.get() + 1);
    }
    let status = call();
    let thread = span.thread();
    if runtime {
        thread.gpu_depth.set(thread.gpu_depth.get().saturating_sub(1));
    }
    // The launch ended here: naming the kernel (the first launch of each) is not its time.
    let end = crate::clock::now();
    let correlation = take_link(linked, span.thread());
    span.define_symbol(handle, |buf| name(handle, buf));
    span.finish_gpu(end, GpuCall { status, ..fields(status) }, func, status != 0, correlation);
    status
}

fn copy_c_string(text: *const c_char, buf: &mut [u8]) -> usize {
    if text.is_null() {
        return 0;
    }
    // Safety: CUDA and dladdr return NUL-terminated names that live as long as the module.
    let bytes = unsafe { core::ffi::CStr::from_ptr(text) }.to_bytes();
    crate::sys::copy_prefix(buf, bytes)
}

/// The name of a runtime kernel (its host stub address): `cudaFuncGetName` (CUDA 12.3+), else
/// the stub's symbol through `dladdr`. The name stays mangled; the tools demangle.
pub fn runtime_kernel_name(handle: u64, buf: &mut [u8]) -> usize {
    static GET_NAME: Real = Real::in_libraries(c"cudaFuncGetName", CUDA_RUNTIME);
    if let Some(addr) = GET_NAME.get() {
        // Safety: cudaFuncGetName(const char** name, const void* func) -> cudaError_t.
        let get: unsafe extern "C" fn(*mut *const c_char, *const c_void) -> c_int = unsafe { as_fn(addr) };
        let mut name: *const c_char = core::ptr::null();
        // Safety: valid out pointer; the handle is what the application launched.
        if unsafe { get(&mut name, handle as *const c_void) } == 0 {
            let len = copy_c_string(name, buf);
            if len > 0 {
                return len;
            }
        }
    }
    symbol_name(handle, buf)
}

/// The name of a driver kernel: `cuFuncGetName` for a CUfunction (cuBLAS, Triton, modules
/// loaded by hand), else `cuKernelGetName` for a CUkernel (CUDA 12.3+). The CUDA runtime of 12
/// and later loads its kernels as libraries and launches the CUkernel handles through
/// `cuLaunchKernel` directly, which `cuFuncGetName` refuses: on an H200 with PyTorch 2.11 (CUDA
/// 13) every one of PyTorch's own kernels came out unnamed without the second lookup.
pub fn driver_kernel_name(handle: u64, buf: &mut [u8]) -> usize {
    static FUNC_NAME: Real = Real::in_libraries(c"cuFuncGetName", CUDA_DRIVER);
    static KERNEL_NAME: Real = Real::in_libraries(c"cuKernelGetName", CUDA_DRIVER);
    for lookup in [&FUNC_NAME, &KERNEL_NAME] {
        let Some(addr) = lookup.get() else { continue };
        // Safety: cuFuncGetName(const char** name, CUfunction hfunc) and cuKernelGetName(const
        // char** name, CUkernel hfunc) -> CUresult; both check the handle's type and refuse
        // one of the other kind with an error.
        let get: unsafe extern "C" fn(*mut *const c_char, *mut c_void) -> c_int = unsafe { as_fn(addr) };
        let mut name: *const c_char = core::ptr::null();
        // Safety: valid out pointer; the handle is what the application launched.
        if unsafe { get(&mut name, handle as *mut c_void) } == 0 {
            let len = copy_c_string(name, buf);
            if len > 0 {
                return len;
            }
        }
    }
    0
}

fn symbol_name(address: u64, buf: &mut [u8]) -> usize {
    // Safety: dladdr only reads the loader's tables; `info` is a valid out pointer.
    unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(address as *const c_void, &mut info) != 0 && info.dli_saddr as u64 == address {
            return copy_c_string(info.dli_sname, buf);
        }
    }
    0
}

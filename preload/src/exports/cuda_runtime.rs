//! CUDA runtime API hooks (libcudart 12 and 13, and the per-thread default stream `_ptsz` /
//! `_ptds` variants). The real functions are found through `RTLD_NEXT`, or through the loaded
//! libcudart by handle when it was loaded `RTLD_LOCAL` (as under a Python extension).

#![allow(non_snake_case)]

use core::ffi::{c_int, c_uint, c_void};

use mlprof_format::func::Func;
use mlprof_format::record::{COPY_DEFAULT, GpuCall, pack_launch_dims};

use crate::gpu::{NOT_FOUND_STATUS, gpu_hook, launch_call, real_slot, runtime_kernel_name};
use crate::real::as_fn;

type Stream = *mut c_void;

/// CUDA's `dim3`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Dim3 {
    x: c_uint,
    y: c_uint,
    z: c_uint,
}

/// The head of `cudaLaunchConfig_t` (the fields we read).
#[repr(C)]
pub struct LaunchConfig {
    grid: Dim3,
    block: Dim3,
    dynamic_smem_bytes: usize,
    stream: Stream,
}

fn dims(d: Dim3) -> (u32, u32, u32) {
    (d.x, d.y, d.z)
}

fn copy_kind(kind: c_int) -> u32 {
    if (0..=3).contains(&kind) { kind as u32 } else { COPY_DEFAULT }
}

fn launch_fields(grid: Dim3, block: Dim3, stream: Stream, func: *const c_void) -> GpuCall {
    let (grid, block) = pack_launch_dims(dims(grid), dims(block));
    GpuCall { aux: block, arg: grid, stream: stream as u64, object: func as u64, ..GpuCall::default() }
}

// ---- launches ------------------------------------------------------------------------------

macro_rules! launch_hook {
    ($sym:ident => $func:ident, cooperative) => {
        launch_hook!($sym => $func);
    };
    ($sym:ident => $func:ident) => {
        real_slot!($sym, crate::real::CUDA_RUNTIME);
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym(
            func: *const c_void,
            grid: Dim3,
            block: Dim3,
            args: *mut *mut c_void,
            shared_mem: usize,
            stream: Stream,
        ) -> c_int {
            let Some(addr) = $sym::REAL.get() else { return NOT_FOUND_STATUS };
            type Launch = unsafe extern "C" fn(*const c_void, Dim3, Dim3, *mut *mut c_void, usize, Stream) -> c_int;
            // Safety: the slot was resolved for this symbol, whose prototype this is.
            let real: Launch = unsafe { as_fn(addr) };
            launch_call(
                Func::$func,
                func as u64,
                runtime_kernel_name,
                // Safety: forwarding the caller's arguments unchanged.
                || unsafe { real(func, grid, block, args, shared_mem, stream) },
                |_| launch_fields(grid, block, stream, func),
            )
        }
    };
}

launch_hook!(cudaLaunchKernel => CudaLaunchKernel);
launch_hook!(cudaLaunchKernel_ptsz => CudaLaunchKernelPtsz);
launch_hook!(cudaLaunchCooperativeKernel => CudaLaunchCooperativeKernel, cooperative);
launch_hook!(cudaLaunchCooperativeKernel_ptsz => CudaLaunchCooperativeKernelPtsz, cooperative);

macro_rules! launch_ex_hook {
    ($sym:ident => $func:ident) => {
        real_slot!($sym, crate::real::CUDA_RUNTIME);
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym(
            config: *const LaunchConfig,
            func: *const c_void,
            args: *mut *mut c_void,
        ) -> c_int {
            let Some(addr) = $sym::REAL.get() else { return NOT_FOUND_STATUS };
            type LaunchEx =
                unsafe extern "C" fn(*const LaunchConfig, *const c_void, *mut *mut c_void) -> c_int;
            // Safety: the slot was resolved for this symbol, whose prototype this is.
            let real: LaunchEx = unsafe { as_fn(addr) };
            launch_call(
                Func::$func,
                func as u64,
                runtime_kernel_name,
                // Safety: forwarding the caller's arguments unchanged.
                || unsafe { real(config, func, args) },
                |_| {
                    // Safety: the application passed a valid config to the real call; it is
                    // only read (and only when not null).
                    match unsafe { config.as_ref() } {
                        Some(c) => launch_fields(c.grid, c.block, c.stream, func),
                        None => GpuCall { object: func as u64, ..GpuCall::default() },
                    }
                },
            )
        }
    };
}

launch_ex_hook!(cudaLaunchKernelExC => CudaLaunchKernelExC);
launch_ex_hook!(cudaLaunchKernelExC_ptsz => CudaLaunchKernelExCPtsz);

// ---- copies and memsets --------------------------------------------------------------------

macro_rules! copy_hooks {
    ($($sym:ident => $func:ident;)*) => {$(
        gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, $sym => $func(dst: *mut c_void, src: *const c_void, count: usize, kind: c_int),
            |status| GpuCall { aux: copy_kind(kind), arg: count as u64, ..GpuCall::default() });
    )*};
}
copy_hooks! {
    cudaMemcpy => CudaMemcpy;
    cudaMemcpy_ptds => CudaMemcpyPtds;
}

macro_rules! copy_async_hooks {
    ($($sym:ident => $func:ident;)*) => {$(
        gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, $sym => $func(dst: *mut c_void, src: *const c_void, count: usize, kind: c_int, stream: Stream),
            |status| GpuCall { aux: copy_kind(kind), arg: count as u64, stream: stream as u64, ..GpuCall::default() });
    )*};
}
copy_async_hooks! {
    cudaMemcpyAsync => CudaMemcpyAsync;
    cudaMemcpyAsync_ptsz => CudaMemcpyAsyncPtsz;
}

macro_rules! copy_2d_hooks {
    ($($sym:ident => $func:ident;)*) => {$(
        gpu_hook!(outer_call, crate::real::CUDA_RUNTIME,
            $sym => $func(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int),
            |status| GpuCall { aux: copy_kind(kind), arg: width.saturating_mul(height) as u64, ..GpuCall::default() });
    )*};
}
copy_2d_hooks! {
    cudaMemcpy2D => CudaMemcpy2D;
    cudaMemcpy2D_ptds => CudaMemcpy2DPtds;
}

macro_rules! copy_2d_async_hooks {
    ($($sym:ident => $func:ident;)*) => {$(
        gpu_hook!(outer_call, crate::real::CUDA_RUNTIME,
            $sym => $func(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int, stream: Stream),
            |status| GpuCall {
                aux: copy_kind(kind),
                arg: width.saturating_mul(height) as u64,
                stream: stream as u64,
                ..GpuCall::default()
            });
    )*};
}
copy_2d_async_hooks! {
    cudaMemcpy2DAsync => CudaMemcpy2DAsync;
    cudaMemcpy2DAsync_ptsz => CudaMemcpy2DAsyncPtsz;
}

gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaMemset => CudaMemset(ptr: *mut c_void, value: c_int, count: usize),
    |status| GpuCall { arg: count as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaMemset_ptds => CudaMemsetPtds(ptr: *mut c_void, value: c_int, count: usize),
    |status| GpuCall { arg: count as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaMemsetAsync => CudaMemsetAsync(ptr: *mut c_void, value: c_int, count: usize, stream: Stream),
    |status| GpuCall { arg: count as u64, stream: stream as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaMemsetAsync_ptsz => CudaMemsetAsyncPtsz(ptr: *mut c_void, value: c_int, count: usize, stream: Stream),
    |status| GpuCall { arg: count as u64, stream: stream as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME,
    cudaMemset2D => CudaMemset2D(ptr: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize),
    |status| GpuCall { arg: width.saturating_mul(height) as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME,
    cudaMemset2D_ptds => CudaMemset2DPtds(ptr: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize),
    |status| GpuCall { arg: width.saturating_mul(height) as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME,
    cudaMemset2DAsync => CudaMemset2DAsync(ptr: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize, stream: Stream),
    |status| GpuCall { arg: width.saturating_mul(height) as u64, stream: stream as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME,
    cudaMemset2DAsync_ptsz => CudaMemset2DAsyncPtsz(ptr: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize, stream: Stream),
    |status| GpuCall { arg: width.saturating_mul(height) as u64, stream: stream as u64, ..GpuCall::default() });

// ---- allocations ---------------------------------------------------------------------------

/// The pointer an allocation call stored, when it succeeded.
fn allocated(status: c_int, out: *mut *mut c_void) -> u64 {
    if status != 0 || out.is_null() {
        return 0;
    }
    // Safety: on success the real call stored a pointer through the application's out pointer.
    unsafe { *out as u64 }
}

gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaMalloc => CudaMalloc(out: *mut *mut c_void, size: usize),
    |status| GpuCall { arg: size as u64, object: allocated(status, out), ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaMallocHost => CudaMallocHost(out: *mut *mut c_void, size: usize),
    |status| GpuCall { arg: size as u64, object: allocated(status, out), ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaHostAlloc => CudaHostAlloc(out: *mut *mut c_void, size: usize, flags: c_uint),
    |status| GpuCall { arg: size as u64, object: allocated(status, out), ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaMallocAsync => CudaMallocAsync(out: *mut *mut c_void, size: usize, stream: Stream),
    |status| GpuCall { arg: size as u64, stream: stream as u64, object: allocated(status, out), ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaMallocAsync_ptsz => CudaMallocAsyncPtsz(out: *mut *mut c_void, size: usize, stream: Stream),
    |status| GpuCall { arg: size as u64, stream: stream as u64, object: allocated(status, out), ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaFree => CudaFree(ptr: *mut c_void),
    |status| GpuCall { object: ptr as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaFreeHost => CudaFreeHost(ptr: *mut c_void),
    |status| GpuCall { object: ptr as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaFreeAsync => CudaFreeAsync(ptr: *mut c_void, stream: Stream),
    |status| GpuCall { stream: stream as u64, object: ptr as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaFreeAsync_ptsz => CudaFreeAsyncPtsz(ptr: *mut c_void, stream: Stream),
    |status| GpuCall { stream: stream as u64, object: ptr as u64, ..GpuCall::default() });

// ---- synchronization, events, graphs -------------------------------------------------------

gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaStreamSynchronize => CudaStreamSynchronize(stream: Stream),
    |status| GpuCall { stream: stream as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaStreamSynchronize_ptsz => CudaStreamSynchronizePtsz(stream: Stream),
    |status| GpuCall { stream: stream as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaDeviceSynchronize => CudaDeviceSynchronize(),
    |status| GpuCall::default());
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaEventSynchronize => CudaEventSynchronize(event: *mut c_void),
    |status| GpuCall { object: event as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaEventRecord => CudaEventRecord(event: *mut c_void, stream: Stream),
    |status| GpuCall { stream: stream as u64, object: event as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaEventRecord_ptsz => CudaEventRecordPtsz(event: *mut c_void, stream: Stream),
    |status| GpuCall { stream: stream as u64, object: event as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaEventQuery => CudaEventQuery(event: *mut c_void),
    |status| GpuCall { object: event as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaStreamWaitEvent => CudaStreamWaitEvent(stream: Stream, event: *mut c_void, flags: c_uint),
    |status| GpuCall { stream: stream as u64, object: event as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME,
    cudaStreamWaitEvent_ptsz => CudaStreamWaitEventPtsz(stream: Stream, event: *mut c_void, flags: c_uint),
    |status| GpuCall { stream: stream as u64, object: event as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaStreamQuery => CudaStreamQuery(stream: Stream),
    |status| GpuCall { stream: stream as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaStreamQuery_ptsz => CudaStreamQueryPtsz(stream: Stream),
    |status| GpuCall { stream: stream as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaGraphLaunch => CudaGraphLaunch(graph: *mut c_void, stream: Stream),
    |status| GpuCall { stream: stream as u64, object: graph as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::CUDA_RUNTIME, cudaGraphLaunch_ptsz => CudaGraphLaunchPtsz(graph: *mut c_void, stream: Stream),
    |status| GpuCall { stream: stream as u64, object: graph as u64, ..GpuCall::default() });

// ---- profiler control (`--capture-range=cudaProfilerApi`) ---------------------------------

crate::gpu::profiler_hook!(crate::real::CUDA_RUNTIME, cudaProfilerStart => CudaProfilerStart);
crate::gpu::profiler_hook!(crate::real::CUDA_RUNTIME, cudaProfilerStop => CudaProfilerStop);

// ---- device selection (the device recorded on this thread's later calls) -------------------

real_slot!(cudaSetDevice, crate::real::CUDA_RUNTIME);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaSetDevice(device: c_int) -> c_int {
    let Some(addr) = cudaSetDevice::REAL.get() else { return NOT_FOUND_STATUS };
    // Safety: the slot was resolved for cudaSetDevice(int) -> cudaError_t.
    let real: unsafe extern "C" fn(c_int) -> c_int = unsafe { as_fn(addr) };
    // Safety: forwarding the caller's argument unchanged.
    let status = crate::gpu::outer_call(
        Func::CudaSetDevice,
        || unsafe { real(device) },
        |_| GpuCall { device, arg: device as u64, ..GpuCall::default() },
    );
    if status == 0 {
        crate::recorder::set_thread_device(device);
    }
    status
}

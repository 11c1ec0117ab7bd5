//! CUDA driver API hooks. Exporting the symbols catches programs linked against libcuda; the
//! runtime, PyTorch and Triton instead fetch driver entry points through `cuGetProcAddress`
//! and `dlsym` on a libcuda handle, where `entry_points` hands back these same functions (see
//! [`WRAPPERS`]).

#![allow(non_snake_case)]

use core::ffi::{c_int, c_uint, c_void};

use mlprof_format::func::Func;
use mlprof_format::record::{COPY_D2D, COPY_D2H, COPY_DEFAULT, COPY_H2D, GpuCall, pack_launch_dims};

use crate::gpu::{NOT_FOUND_STATUS, driver_kernel_name, gpu_hook, launch_call, real_slot};
use crate::real::{Real, as_fn};

type Stream = *mut c_void;
type DevicePtr = u64;

/// The head of `CUlaunchConfig` (the fields we read).
#[repr(C)]
pub struct LaunchConfig {
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_mem_bytes: c_uint,
    stream: Stream,
}

// ---- launches ------------------------------------------------------------------------------

macro_rules! launch_hook {
    ($sym:ident => $func:ident) => {
        real_slot!($sym, crate::real::CUDA_DRIVER);
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym(
            f: *mut c_void,
            gx: c_uint,
            gy: c_uint,
            gz: c_uint,
            bx: c_uint,
            by: c_uint,
            bz: c_uint,
            shared_mem: c_uint,
            stream: Stream,
            params: *mut *mut c_void,
            extra: *mut *mut c_void,
        ) -> c_int {
            let Some(addr) = $sym::REAL.get() else { return NOT_FOUND_STATUS };
            type Launch = unsafe extern "C" fn(
                *mut c_void,
                c_uint,
                c_uint,
                c_uint,
                c_uint,
                c_uint,
                c_uint,
                c_uint,
                Stream,
                *mut *mut c_void,
                *mut *mut c_void,
            ) -> c_int;
            // Safety: the slot was resolved for this symbol, whose prototype this is.
            let real: Launch = unsafe { as_fn(addr) };
            launch_call(
                Func::$func,
                f as u64,
                driver_kernel_name,
                // Safety: forwarding the caller's arguments unchanged.
                || unsafe { real(f, gx, gy, gz, bx, by, bz, shared_mem, stream, params, extra) },
                |_| {
                    let (grid, block) = pack_launch_dims((gx, gy, gz), (bx, by, bz));
                    GpuCall {
                        aux: block,
                        arg: grid,
                        stream: stream as u64,
                        object: f as u64,
                        ..GpuCall::default()
                    }
                },
            )
        }
    };
}

launch_hook!(cuLaunchKernel => CuLaunchKernel);
launch_hook!(cuLaunchKernel_ptsz => CuLaunchKernelPtsz);

macro_rules! launch_ex_hook {
    ($sym:ident => $func:ident) => {
        real_slot!($sym, crate::real::CUDA_DRIVER);
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym(
            config: *const LaunchConfig,
            f: *mut c_void,
            params: *mut *mut c_void,
            extra: *mut *mut c_void,
        ) -> c_int {
            let Some(addr) = $sym::REAL.get() else { return NOT_FOUND_STATUS };
            type LaunchEx = unsafe extern "C" fn(
                *const LaunchConfig,
                *mut c_void,
                *mut *mut c_void,
                *mut *mut c_void,
            ) -> c_int;
            // Safety: the slot was resolved for this symbol, whose prototype this is.
            let real: LaunchEx = unsafe { as_fn(addr) };
            launch_call(
                Func::$func,
                f as u64,
                driver_kernel_name,
                // Safety: forwarding the caller's arguments unchanged.
                || unsafe { real(config, f, params, extra) },
                // Safety: the config was valid for the real call; it is only read, if not null.
                |_| match unsafe { config.as_ref() } {
                    Some(c) => {
                        let (grid, block) = pack_launch_dims(
                            (c.grid_x, c.grid_y, c.grid_z),
                            (c.block_x, c.block_y, c.block_z),
                        );
                        GpuCall {
                            aux: block,
                            arg: grid,
                            stream: c.stream as u64,
                            object: f as u64,
                            ..GpuCall::default()
                        }
                    }
                    None => GpuCall { object: f as u64, ..GpuCall::default() },
                },
            )
        }
    };
}

launch_ex_hook!(cuLaunchKernelEx => CuLaunchKernelEx);
launch_ex_hook!(cuLaunchKernelEx_ptsz => CuLaunchKernelExPtsz);

// ---- copies --------------------------------------------------------------------------------

macro_rules! copy_hook {
    ($sym:ident => $func:ident, $direction:expr, ($($arg:ident : $ty:ty),*), $bytes:ident) => {
        gpu_hook!(driver_call, crate::real::CUDA_DRIVER, $sym => $func($($arg: $ty),*),
            |status| GpuCall { aux: $direction, arg: $bytes as u64, ..GpuCall::default() });
    };
    ($sym:ident => $func:ident, $direction:expr, ($($arg:ident : $ty:ty),*), $bytes:ident, $stream:ident) => {
        gpu_hook!(driver_call, crate::real::CUDA_DRIVER, $sym => $func($($arg: $ty),*),
            |status| GpuCall { aux: $direction, arg: $bytes as u64, stream: $stream as u64, ..GpuCall::default() });
    };
}

copy_hook!(cuMemcpy => CuMemcpy, COPY_DEFAULT, (dst: DevicePtr, src: DevicePtr, bytes: usize), bytes);
copy_hook!(cuMemcpy_ptds => CuMemcpyPtds, COPY_DEFAULT, (dst: DevicePtr, src: DevicePtr, bytes: usize), bytes);
copy_hook!(cuMemcpyAsync => CuMemcpyAsync, COPY_DEFAULT, (dst: DevicePtr, src: DevicePtr, bytes: usize, stream: Stream), bytes, stream);
copy_hook!(cuMemcpyAsync_ptsz => CuMemcpyAsyncPtsz, COPY_DEFAULT, (dst: DevicePtr, src: DevicePtr, bytes: usize, stream: Stream), bytes, stream);
copy_hook!(cuMemcpyHtoD_v2 => CuMemcpyHtoD, COPY_H2D, (dst: DevicePtr, src: *const c_void, bytes: usize), bytes);
copy_hook!(cuMemcpyHtoD_v2_ptds => CuMemcpyHtoDPtds, COPY_H2D, (dst: DevicePtr, src: *const c_void, bytes: usize), bytes);
copy_hook!(cuMemcpyDtoH_v2 => CuMemcpyDtoH, COPY_D2H, (dst: *mut c_void, src: DevicePtr, bytes: usize), bytes);
copy_hook!(cuMemcpyDtoH_v2_ptds => CuMemcpyDtoHPtds, COPY_D2H, (dst: *mut c_void, src: DevicePtr, bytes: usize), bytes);
copy_hook!(cuMemcpyDtoD_v2 => CuMemcpyDtoD, COPY_D2D, (dst: DevicePtr, src: DevicePtr, bytes: usize), bytes);
copy_hook!(cuMemcpyDtoD_v2_ptds => CuMemcpyDtoDPtds, COPY_D2D, (dst: DevicePtr, src: DevicePtr, bytes: usize), bytes);
copy_hook!(cuMemcpyHtoDAsync_v2 => CuMemcpyHtoDAsync, COPY_H2D, (dst: DevicePtr, src: *const c_void, bytes: usize, stream: Stream), bytes, stream);
copy_hook!(cuMemcpyHtoDAsync_v2_ptsz => CuMemcpyHtoDAsyncPtsz, COPY_H2D, (dst: DevicePtr, src: *const c_void, bytes: usize, stream: Stream), bytes, stream);
copy_hook!(cuMemcpyDtoHAsync_v2 => CuMemcpyDtoHAsync, COPY_D2H, (dst: *mut c_void, src: DevicePtr, bytes: usize, stream: Stream), bytes, stream);
copy_hook!(cuMemcpyDtoHAsync_v2_ptsz => CuMemcpyDtoHAsyncPtsz, COPY_D2H, (dst: *mut c_void, src: DevicePtr, bytes: usize, stream: Stream), bytes, stream);
copy_hook!(cuMemcpyDtoDAsync_v2 => CuMemcpyDtoDAsync, COPY_D2D, (dst: DevicePtr, src: DevicePtr, bytes: usize, stream: Stream), bytes, stream);
copy_hook!(cuMemcpyDtoDAsync_v2_ptsz => CuMemcpyDtoDAsyncPtsz, COPY_D2D, (dst: DevicePtr, src: DevicePtr, bytes: usize, stream: Stream), bytes, stream);

// ---- allocations ---------------------------------------------------------------------------

fn allocated<T: Copy + Into<u64>>(status: c_int, out: *mut T) -> u64 {
    if status != 0 || out.is_null() {
        return 0;
    }
    // Safety: on success the real call stored a value through the application's out pointer.
    unsafe { (*out).into() }
}

fn host_allocated(status: c_int, out: *mut *mut c_void) -> u64 {
    if status != 0 || out.is_null() {
        return 0;
    }
    // Safety: as in `allocated`.
    unsafe { *out as u64 }
}

gpu_hook!(driver_call, crate::real::CUDA_DRIVER, cuMemAlloc_v2 => CuMemAlloc(out: *mut DevicePtr, bytes: usize),
    |status| GpuCall { arg: bytes as u64, object: allocated(status, out), ..GpuCall::default() });
gpu_hook!(driver_call, crate::real::CUDA_DRIVER, cuMemFree_v2 => CuMemFree(ptr: DevicePtr),
    |status| GpuCall { object: ptr, ..GpuCall::default() });
gpu_hook!(driver_call, crate::real::CUDA_DRIVER, cuMemAllocHost_v2 => CuMemAllocHost(out: *mut *mut c_void, bytes: usize),
    |status| GpuCall { arg: bytes as u64, object: host_allocated(status, out), ..GpuCall::default() });
gpu_hook!(driver_call, crate::real::CUDA_DRIVER, cuMemFreeHost => CuMemFreeHost(ptr: *mut c_void),
    |status| GpuCall { object: ptr as u64, ..GpuCall::default() });
gpu_hook!(driver_call, crate::real::CUDA_DRIVER, cuMemAllocAsync => CuMemAllocAsync(out: *mut DevicePtr, bytes: usize, stream: Stream),
    |status| GpuCall { arg: bytes as u64, stream: stream as u64, object: allocated(status, out), ..GpuCall::default() });
gpu_hook!(driver_call, crate::real::CUDA_DRIVER, cuMemAllocAsync_ptsz => CuMemAllocAsyncPtsz(out: *mut DevicePtr, bytes: usize, stream: Stream),
    |status| GpuCall { arg: bytes as u64, stream: stream as u64, object: allocated(status, out), ..GpuCall::default() });
gpu_hook!(driver_call, crate::real::CUDA_DRIVER, cuMemFreeAsync => CuMemFreeAsync(ptr: DevicePtr, stream: Stream),
    |status| GpuCall { stream: stream as u64, object: ptr, ..GpuCall::default() });
gpu_hook!(driver_call, crate::real::CUDA_DRIVER, cuMemFreeAsync_ptsz => CuMemFreeAsyncPtsz(ptr: DevicePtr, stream: Stream),
    |status| GpuCall { stream: stream as u64, object: ptr, ..GpuCall::default() });

// ---- initialization ------------------------------------------------------------------------

real_slot!(cuInit, crate::real::CUDA_DRIVER);
/// Not recorded (a call made once, and no test of ours counts it): a successful `cuInit` is when
/// the process's GPU timeline starts (CUPTI, see `mlprof_preload_core::cupti`). The status is
/// the real call's, whatever becomes of the timeline.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> c_int {
    let Some(addr) = cuInit::REAL.get() else { return NOT_FOUND_STATUS };
    // Safety: the slot was resolved for cuInit, `CUresult cuInit(unsigned int)`.
    let real: unsafe extern "C" fn(c_uint) -> c_int = unsafe { as_fn(addr) };
    // Safety: forwarding the caller's argument unchanged.
    let status = unsafe { real(flags) };
    if status == 0 {
        mlprof_preload_core::cupti::on_cuda_initialized();
    }
    status
}

// ---- synchronization, events, graphs -------------------------------------------------------

gpu_hook!(driver_call, crate::real::CUDA_DRIVER, cuStreamSynchronize => CuStreamSynchronize(stream: Stream),
    |status| GpuCall { stream: stream as u64, ..GpuCall::default() });
gpu_hook!(driver_call, crate::real::CUDA_DRIVER, cuStreamSynchronize_ptsz => CuStreamSynchronizePtsz(stream: Stream),
    |status| GpuCall { stream: stream as u64, ..GpuCall::default() });
gpu_hook!(driver_call, crate::real::CUDA_DRIVER, cuCtxSynchronize => CuCtxSynchronize(), |status| GpuCall::default());
gpu_hook!(driver_call, crate::real::CUDA_DRIVER, cuEventSynchronize => CuEventSynchronize(event: *mut c_void),
    |status| GpuCall { object: event as u64, ..GpuCall::default() });
gpu_hook!(driver_call, crate::real::CUDA_DRIVER, cuEventRecord => CuEventRecord(event: *mut c_void, stream: Stream),
    |status| GpuCall { stream: stream as u64, object: event as u64, ..GpuCall::default() });
gpu_hook!(driver_call, crate::real::CUDA_DRIVER, cuEventRecord_ptsz => CuEventRecordPtsz(event: *mut c_void, stream: Stream),
    |status| GpuCall { stream: stream as u64, object: event as u64, ..GpuCall::default() });
gpu_hook!(driver_call, crate::real::CUDA_DRIVER, cuGraphLaunch => CuGraphLaunch(graph: *mut c_void, stream: Stream),
    |status| GpuCall { stream: stream as u64, object: graph as u64, ..GpuCall::default() });
gpu_hook!(driver_call, crate::real::CUDA_DRIVER, cuGraphLaunch_ptsz => CuGraphLaunchPtsz(graph: *mut c_void, stream: Stream),
    |status| GpuCall { stream: stream as u64, object: graph as u64, ..GpuCall::default() });

/// A driver entry point we wrap: the name `cuGetProcAddress` is asked for, and our wrapper and
/// its real-function slot for the legacy and the per-thread-default-stream flavour.
pub struct Wrapper {
    pub name: &'static str,
    pub legacy: (FnAddr, &'static Real),
    pub per_thread: Option<(FnAddr, &'static Real)>,
}

/// The address of one of our hooks (a function pointer kept as data in a static table).
#[derive(Clone, Copy)]
pub struct FnAddr(*const ());

// Safety: the address of a function is immutable, shareable data.
unsafe impl Sync for FnAddr {}

impl FnAddr {
    pub fn addr(self) -> usize {
        self.0 as usize
    }
}

macro_rules! wrappers {
    ($($name:literal => $legacy:ident $(, $per_thread:ident)?;)*) => {
        /// Every wrapped driver entry point, by the name `cuGetProcAddress` is asked for.
        pub static WRAPPERS: &[Wrapper] = &[$(
            Wrapper {
                name: $name,
                legacy: (FnAddr($legacy as *const ()), &$legacy::REAL),
                per_thread: wrappers!(@per_thread $($per_thread)?),
            },
        )*];
    };
    (@per_thread) => { None };
    (@per_thread $per_thread:ident) => { Some((FnAddr($per_thread as *const ()), &$per_thread::REAL)) };
}

wrappers! {
    "cuLaunchKernel" => cuLaunchKernel, cuLaunchKernel_ptsz;
    "cuLaunchKernelEx" => cuLaunchKernelEx, cuLaunchKernelEx_ptsz;
    "cuMemcpy" => cuMemcpy, cuMemcpy_ptds;
    "cuMemcpyAsync" => cuMemcpyAsync, cuMemcpyAsync_ptsz;
    "cuMemcpyHtoD" => cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds;
    "cuMemcpyDtoH" => cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds;
    "cuMemcpyDtoD" => cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds;
    "cuMemcpyHtoDAsync" => cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz;
    "cuMemcpyDtoHAsync" => cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz;
    "cuMemcpyDtoDAsync" => cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz;
    "cuMemAlloc" => cuMemAlloc_v2;
    "cuMemFree" => cuMemFree_v2;
    "cuMemAllocHost" => cuMemAllocHost_v2;
    "cuMemFreeHost" => cuMemFreeHost;
    "cuMemAllocAsync" => cuMemAllocAsync, cuMemAllocAsync_ptsz;
    "cuMemFreeAsync" => cuMemFreeAsync, cuMemFreeAsync_ptsz;
    "cuStreamSynchronize" => cuStreamSynchronize, cuStreamSynchronize_ptsz;
    "cuCtxSynchronize" => cuCtxSynchronize;
    "cuEventSynchronize" => cuEventSynchronize;
    "cuEventRecord" => cuEventRecord, cuEventRecord_ptsz;
    "cuGraphLaunch" => cuGraphLaunch, cuGraphLaunch_ptsz;
    "cuInit" => cuInit;
    "cuProfilerStart" => cuProfilerStart;
    "cuProfilerStop" => cuProfilerStop;
}

// ---- profiler control (`--capture-range=cudaProfilerApi`) ---------------------------------

crate::gpu::profiler_hook!(crate::real::CUDA_DRIVER, cuProfilerStart => CuProfilerStart);
crate::gpu::profiler_hook!(crate::real::CUDA_DRIVER, cuProfilerStop => CuProfilerStop);

//! Handing our driver wrappers to code that does not call driver symbols by name: the CUDA
//! runtime, PyTorch and Triton fetch driver entry points with `cuGetProcAddress` (directly or
//! through `cudaGetDriverEntryPoint*`) or with `dlsym` on a libcuda handle, which plain symbol
//! interposition never sees.

#![allow(non_snake_case)]

use core::ffi::{CStr, c_char, c_int, c_ulonglong, c_void};

use super::cuda_driver::WRAPPERS;
use crate::real::{CUDA_DRIVER, CUDA_RUNTIME, Real, as_fn, real_dlsym};

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
const PER_THREAD_DEFAULT_STREAM: c_ulonglong = 1 << 1;

/// Our wrapper for driver entry point `name` (as `cuGetProcAddress` is asked for it), having
/// remembered `real` as the function it calls; `real` itself when we do not wrap `name`.
fn wrap(name: &[u8], real: usize, per_thread: bool) -> usize {
    if real == 0 {
        return real;
    }
    let Some(wrapper) = WRAPPERS.iter().find(|w| w.name.as_bytes() == name) else { return real };
    let (ours, slot) = match (per_thread, wrapper.per_thread) {
        (true, Some(per_thread)) => per_thread,
        _ => wrapper.legacy,
    };
    adopt(real, ours.addr(), slot)
}

/// Our wrapper for the exact symbol `name` found by `dlsym` on a handle (names carry their
/// version suffix there: `cuMemcpyHtoD_v2`, `cuLaunchKernel_ptsz`).
fn wrap_symbol(name: &[u8], real: usize) -> usize {
    if real == 0 {
        return real;
    }
    if name == b"cuGetProcAddress_v2" {
        return adopt(real, cuGetProcAddress_v2 as *const () as usize, &GET_PROC_ADDRESS_V2);
    }
    if name == b"cuGetProcAddress" {
        return adopt(real, cuGetProcAddress as *const () as usize, &GET_PROC_ADDRESS);
    }
    for wrapper in WRAPPERS {
        for (ours, slot) in core::iter::once(wrapper.legacy).chain(wrapper.per_thread) {
            if slot.name().to_bytes() == name {
                return adopt(real, ours.addr(), slot);
            }
        }
    }
    real
}

fn adopt(real: usize, ours: usize, slot: &Real) -> usize {
    if real == ours {
        return real;
    }
    slot.offer(real);
    ours
}

fn c_name<'a>(name: *const c_char) -> &'a [u8] {
    if name.is_null() {
        return b"";
    }
    // Safety: the caller passed a NUL-terminated symbol name.
    unsafe { CStr::from_ptr(name) }.to_bytes()
}

/// Swaps the function pointer a lookup stored in `*pfn` for our wrapper.
fn swap_result(
    status: c_int,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: c_ulonglong,
) {
    if status != 0 || pfn.is_null() {
        return;
    }
    let name = c_name(symbol);
    // Safety: on success the lookup stored a function pointer through `pfn`.
    let real = unsafe { *pfn } as usize;
    let ours = match name {
        // Asking for the lookup function itself: from CUDA 12 on the driver hands out the v2 ABI.
        b"cuGetProcAddress" if cuda_version >= 12000 => {
            adopt(real, cuGetProcAddress_v2 as *const () as usize, &GET_PROC_ADDRESS_V2)
        }
        b"cuGetProcAddress" => adopt(real, cuGetProcAddress as *const () as usize, &GET_PROC_ADDRESS),
        _ => wrap(name, real, flags & PER_THREAD_DEFAULT_STREAM != 0),
    };
    // Safety: writing back through the same valid out pointer.
    unsafe { *pfn = ours as *mut c_void };
}

static GET_PROC_ADDRESS: Real = Real::in_libraries(c"cuGetProcAddress", CUDA_DRIVER);
static GET_PROC_ADDRESS_V2: Real = Real::in_libraries(c"cuGetProcAddress_v2", CUDA_DRIVER);

/// CUDA 11.3–11.x lookup.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: c_ulonglong,
) -> c_int {
    let Some(addr) = GET_PROC_ADDRESS.get() else { return crate::gpu::NOT_FOUND_STATUS };
    type Lookup = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, c_ulonglong) -> c_int;
    // Safety: the slot holds cuGetProcAddress, whose prototype this is.
    let status = unsafe { as_fn::<Lookup>(addr)(symbol, pfn, cuda_version, flags) };
    swap_result(status, symbol, pfn, cuda_version, flags);
    status
}

/// CUDA 12+ lookup (what `cuGetProcAddress` means in CUDA 12 headers).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: c_ulonglong,
    symbol_status: *mut c_int,
) -> c_int {
    let Some(addr) = GET_PROC_ADDRESS_V2.get() else { return crate::gpu::NOT_FOUND_STATUS };
    type Lookup =
        unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, c_ulonglong, *mut c_int) -> c_int;
    // Safety: the slot holds cuGetProcAddress_v2, whose prototype this is.
    let status = unsafe { as_fn::<Lookup>(addr)(symbol, pfn, cuda_version, flags, symbol_status) };
    swap_result(status, symbol, pfn, cuda_version, flags);
    status
}

static DRIVER_ENTRY_POINT: Real = Real::in_libraries(c"cudaGetDriverEntryPoint", CUDA_RUNTIME);
static DRIVER_ENTRY_POINT_BY_VERSION: Real =
    Real::in_libraries(c"cudaGetDriverEntryPointByVersion", CUDA_RUNTIME);

/// `cudaGetDriverEntryPoint(symbol, funcPtr, flags, driverStatus)` (CUDA 12 prototype).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGetDriverEntryPoint(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    flags: c_ulonglong,
    driver_status: *mut c_int,
) -> c_int {
    let Some(addr) = DRIVER_ENTRY_POINT.get() else { return crate::gpu::NOT_FOUND_STATUS };
    type Lookup = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_ulonglong, *mut c_int) -> c_int;
    // Safety: the slot holds cudaGetDriverEntryPoint, whose prototype this is.
    let status = unsafe { as_fn::<Lookup>(addr)(symbol, pfn, flags, driver_status) };
    swap_result(status, symbol, pfn, 12000, flags);
    status
}

/// `cudaGetDriverEntryPointByVersion(symbol, funcPtr, cudaVersion, flags, driverStatus)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGetDriverEntryPointByVersion(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: c_ulonglong,
    driver_status: *mut c_int,
) -> c_int {
    let Some(addr) = DRIVER_ENTRY_POINT_BY_VERSION.get() else { return crate::gpu::NOT_FOUND_STATUS };
    type Lookup =
        unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, c_ulonglong, *mut c_int) -> c_int;
    // Safety: the slot holds cudaGetDriverEntryPointByVersion, whose prototype this is.
    let status = unsafe { as_fn::<Lookup>(addr)(symbol, pfn, cuda_version, flags, driver_status) };
    swap_result(status, symbol, pfn, cuda_version, flags);
    status
}

// ---- dlsym ---------------------------------------------------------------------------------

/// Lookups of `cu*` names on an explicit handle: the real lookup, then our wrapper instead.
extern "C" fn dlsym_driver_symbol(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    type Dlsym = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
    // Safety: real_dlsym returns glibc's dlsym (or a stand-in with the same prototype).
    let real = unsafe { as_fn::<Dlsym>(real_dlsym())(handle, name) } as usize;
    wrap_symbol(c_name(name), real) as *mut c_void
}

/// `dlsym`: every lookup goes straight to glibc's dlsym by a tail jump (so lookups relative to
/// the caller — `RTLD_NEXT`, `RTLD_DEFAULT` — still see the real caller), except lookups of
/// `cu…` names on an explicit handle (libcuda's), which get our wrappers.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "test rdi, rdi",
        "jz 2f",
        "cmp rdi, -1",
        "je 2f",
        "test rsi, rsi",
        "jz 2f",
        "cmp byte ptr [rsi], 0x63",
        "jne 2f",
        "cmp byte ptr [rsi + 1], 0x75",
        "jne 2f",
        "jmp {wrapped}",
        "2:",
        // Keep the arguments across the call; three pushes realign the stack for it.
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {real}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "jmp rax",
        wrapped = sym dlsym_driver_symbol,
        real = sym real_dlsym,
    )
}

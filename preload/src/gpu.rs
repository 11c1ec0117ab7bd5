//! The macros that define GPU hooks (each one an exported `extern "C"` function plus its
//! real-function slot), over the core's GPU recording (`mlprof_preload_core::gpu`), which is
//! re-exported here so the hook files name one module.

pub use mlprof_preload_core::gpu::*;

/// Declares the real-function slot `$sym::REAL` of a GPU hook, searched in `$libs` when
/// `RTLD_NEXT` does not reach the library.
macro_rules! real_slot {
    ($sym:ident, $libs:expr) => {
        #[allow(non_snake_case)]
        pub mod $sym {
            pub static REAL: mlprof_preload_core::real::Real = mlprof_preload_core::real::Real::in_libraries(
                mlprof_preload_core::real::cstr(concat!(stringify!($sym), "\0").as_bytes()),
                $libs,
            );
        }
    };
}
pub(crate) use real_slot;

/// Defines a GPU hook `$sym` recorded as `$func` with `$recorder` (`outer_call` or
/// `driver_call`); `$fields` builds the record from the arguments and the returned status.
macro_rules! gpu_hook {
    ($recorder:ident, $libs:expr, $sym:ident => $func:ident ($($arg:ident : $ty:ty),*), |$status:ident| $fields:expr) => {
        crate::gpu::real_slot!($sym, $libs);
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym($($arg: $ty),*) -> core::ffi::c_int {
            let Some(addr) = $sym::REAL.get() else { return crate::gpu::NOT_FOUND_STATUS };
            // Safety: the slot was resolved for this very symbol, whose C prototype this is.
            let real: unsafe extern "C" fn($($ty),*) -> core::ffi::c_int = unsafe { mlprof_preload_core::real::as_fn(addr) };
            crate::gpu::$recorder(
                mlprof_format::func::Func::$func,
                // Safety: forwarding the caller's arguments unchanged.
                || unsafe { real($($arg),*) },
                |status_value| {
                    let $status = status_value;
                    let _ = $status;
                    $fields
                },
            )
        }
    };
}
pub(crate) use gpu_hook;

/// Defines a profiler-control hook `$sym() -> status` (`cudaProfilerStart`, `cuProfilerStop`,
/// …): with `--capture-range=cudaProfilerApi` it flips the capture gate for `$trigger` (see
/// `recorder::capture`) before the real call, which then runs and whose status is returned
/// whatever it is. The call itself is not recorded: its edge is.
macro_rules! profiler_hook {
    ($libs:expr, $sym:ident => $trigger:ident) => {
        crate::gpu::real_slot!($sym, $libs);
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym() -> core::ffi::c_int {
            mlprof_preload_core::recorder::capture::flip(mlprof_format::ring::Trigger::$trigger);
            let Some(addr) = $sym::REAL.get() else { return crate::gpu::NOT_FOUND_STATUS };
            type Real = unsafe extern "C" fn() -> core::ffi::c_int;
            // Safety: the slot was resolved for this very symbol, whose C prototype is `int f(void)`.
            let real: Real = unsafe { mlprof_preload_core::real::as_fn(addr) };
            // Safety: the real function, called as the application called ours.
            unsafe { real() }
        }
    };
}
pub(crate) use profiler_hook;

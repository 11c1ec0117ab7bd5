//! Capture ranges from Python: the entry points the wheel's `mlprof.start()`/`stop()` and the
//! `--torch` hook's `--steps` call through ctypes (found in the global namespace, where
//! `LD_PRELOAD` put this library; absent without a collector, and then the callers do
//! nothing). Each flips the ring's capture gate when the run's capture source allows it (see
//! `recorder::capture`) and returns 1 when it did, 0 when nothing changed.

use core::ffi::c_int;

use mlprof_format::ring::Trigger;
use mlprof_preload_core::recorder::capture;

/// `mlprof.start()`: opens a range under `--capture-range=itt`, like `__itt_resume`.
#[unsafe(no_mangle)]
pub extern "C" fn mlprof_capture_start() -> c_int {
    capture::flip(Trigger::ApiStart) as c_int
}

/// `mlprof.stop()`: closes the range under `--capture-range=itt`, like `__itt_pause`.
#[unsafe(no_mangle)]
pub extern "C" fn mlprof_capture_stop() -> c_int {
    capture::flip(Trigger::ApiStop) as c_int
}

/// `--steps A-B`: the `--torch` hook opens the range when step A begins (step A − 1's
/// `optimizer.step()` returned) and closes it when step B's returns (`open` 0).
#[unsafe(no_mangle)]
pub extern "C" fn mlprof_capture_steps(open: c_int) -> c_int {
    capture::flip(if open != 0 { Trigger::StepStart } else { Trigger::StepEnd }) as c_int
}

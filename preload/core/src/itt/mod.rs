//! mlprof as an Intel ITT collector. The ittnotify "static part" compiled into applications and
//! libraries (PyTorch, oneDNN, Intel's `ittapi` Python package, C code) loads the library named
//! by `INTEL_LIBITTNOTIFY64` — the launcher points it at libmlprof.so — and calls
//! `__itt_api_init`, where we fill its function table with ours (`exports::itt`). Tasks, frames,
//! markers and pause/resume then become records in the ring. When the user had pointed
//! `INTEL_LIBITTNOTIFY64` at another collector (VTune's), the launcher passes it on in
//! `MLPROF_ITT_CHAIN` and every call is forwarded to it, so that collector keeps working.
//!
//! The objects (`__itt_domain`, `__itt_string_handle`) may come from a static part that created
//! them before any collector was loaded: names are always read from the object itself.
//!
//! * [`abi`]: the ITT structs;
//! * [`intern`]: domains and string handles, one per name;
//! * [`tasks`]: tasks, frames, markers and pause/resume as records;
//! * [`chain`]: forwarding to a chained collector.

pub mod abi;
pub mod chain;
pub mod intern;
pub mod tasks;

pub use abi::{ApiInfo, IttDomain, IttGlobal, IttId, IttStringHandle};
pub use chain::{CHAIN, as_internal, chained, chained_domain, chained_handle, load_chain};
pub use intern::{domain, string_handle};
pub use tasks::{frame_begin, frame_end, instant, task_begin, task_end};

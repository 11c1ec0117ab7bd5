//! Harness for the mlprof end-to-end tests.
//!
//! The tests run the release binaries (`mlprof-collect`, `mlprof`,
//! `libmlprof.so`) exactly as a user would and check the JSON printed by
//! `mlprof summary --json` against docs/interfaces.md.
//!
//! * Binaries come from `$MLPROF_BIN_DIR`, else `$CARGO_TARGET_DIR/release`,
//!   else `<workspace>/target/release` (run `cargo build --release` first).
//! * C programs in `tests/programs/*.c` are compiled per test with
//!   `gcc -O1 -pthread` into a unique temporary directory.
//! * Python comes from `$MLPROF_TEST_PYTHON`, else the mlprof venv, else
//!   `python3`.
//! * Every child runs under a watchdog (`$MLPROF_TEST_TIMEOUT` seconds,
//!   default 120) that kills its process group, so a hung profiler fails the
//!   test instead of hanging it.  Nothing sleeps to synchronise: attach-mode
//!   tests wait for the collector's `session 'NAME' ready` line.
//! * Temporary directories are removed when a test passes and kept (with
//!   their path printed) when it fails, or always with `MLPROF_KEEP_TMP=1`.
//!
//! One module per concern; everything is re-exported here, so a test file
//! needs only `use mlprof_tests::*;`.
//!
//! | module | concern |
//! |---|---|
//! | [`locations`] | the workspace, test programs and scripts, the binaries, the Python |
//! | [`tmp`] | unique session names, per-test temporary directories |
//! | [`cc`] | compiling C with gcc |
//! | [`child`] | children: clean environment, watchdog, `Driven` (pipes), launcher and preload commands |
//! | [`attach`] | the attach-mode collector |
//! | [`browser`] | the HTML report in headless Chromium: DOM, screenshot |
//! | [`summary`] | `mlprof summary --json` / `mlprof convert`, typed accessors |
//! | [`expect`] | collected exact-count expectations |
//! | [`program`] | a test program run under the launcher; the fork-test opening |
//! | [`skip`](mod@skip) | skips that are printed and counted; `require_*` checks that skip |

pub mod attach;
pub mod browser;
pub mod cc;
pub mod child;
pub mod expect;
pub mod locations;
pub mod program;
pub mod skip;
pub mod strace;
pub mod summary;
pub mod tmp;

pub use attach::*;
pub use cc::*;
pub use child::*;
pub use expect::*;
pub use locations::*;
pub use program::*;
pub use skip::*;
pub use summary::*;
pub use tmp::*;

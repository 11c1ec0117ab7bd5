//! The reports `mlprof` makes from a `run.bin`, as a library: the `mlprof` binary (crate
//! `tools/`) only parses its command line, calls in here and prints.

pub mod chrome;
pub mod energy;
pub mod pipeline;
pub mod run;
pub mod summary;

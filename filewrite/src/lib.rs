//! Writing a large file front to back without making its writer wait or the machine pay for
//! it: a thread of its own writes the bytes ([`BackgroundFile`]), direct to the device where the
//! file system allows it ([`DirectFile`], `O_DIRECT`).
//!
//! Two programs write such files: `mlprof-collect` its run file (64 MB/s at a million records
//! a second, while the job runs), `mlprof convert` its traces (hundreds of MB a second). Through
//! the page cache both cost more kernel CPU than the bytes are worth on these VMs (`dd` of
//! 600 MiB: 1.64 s of system time through the page cache, 0.05 s direct) and evict the job's
//! own cached files.
//!
//! `direct_file` does the aligned, direct writes; `background_file` the writer thread and its
//! bounded queue of chunks.

mod background_file;
mod direct_file;

pub use background_file::BackgroundFile;
pub use direct_file::DirectFile;

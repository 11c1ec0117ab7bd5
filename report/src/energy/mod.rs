//! `mlprof energy`: energy per device, per process and per span name, with uncertainties and
//! coverage; the operator table (`--ops`, `--csv`); and the energy counter tracks of
//! `mlprof convert`.
//!
//! * [`curve`]: a device's energy as a function of time, and its uncertainty.
//! * [`load`]: devices, samples and spans read from a run.
//! * `share`: the overlap rule that gives each span its part of the energy.
//! * [`attribution`]: the report's figures ([`EnergyReport`]), computed from a loaded run;
//!   [`ranges`]: the capture ranges' energy.
//! * [`json`], [`text`], [`csv`]: renderings of the report.
//! * [`tracks`]: the counter tracks of a trace.
//!
//! **Attribution.** The run is cut at every span boundary. The energy of each piece is shared
//! equally by the spans active in it (spans overlapping on different threads share in
//! proportion to their overlap); pieces with no span are unattributed. Coverage = attributed /
//! measured. A span's uncertainty is its share of u at its two ends; sums of many spans add
//! uncertainties in quadrature. Processes share their lifetimes the same way.
//!
//! **Layers.** Sharing happens within a layer: the recorded calls (libc, CUDA, NCCL) are one
//! layer, the ITT spans of each domain another (`itt:PyTorch` ops, `itt:mlprof.phase` phases,
//! `itt:mlprof.data` DataLoader spans, an application's own domains). A phase thus gets the
//! whole energy of its interval, not a share diluted by the ops and calls nested in it; the
//! coverage of each layer is reported (`coverage_by_layer`), and `coverage` is the calls'.

pub(crate) mod attribution;
pub mod csv;
pub(crate) mod curve;
mod gpu_side;
pub mod json;
pub(crate) mod load;
pub(crate) mod ranges;
mod share;
#[cfg(test)]
mod testing;
pub mod text;
pub(crate) mod tracks;

pub use attribution::EnergyReport;
pub use load::EnergyRun;

/// Pseudo-process ids of the device tracks in the trace: `TRACK_PID_BASE + device id`.
pub(crate) const TRACK_PID_BASE: u32 = 0x7fff_0000;

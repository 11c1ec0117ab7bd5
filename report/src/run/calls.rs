//! What a recorded call means beyond its record: bytes moved, NCCL enum names, readable
//! kernel names. Shared by the summary, the energy report and the trace converter.

use mlprof_format::func::{Class, Func};
use mlprof_format::record::{Event, GpuCall};

/// Whether a PyTorch op name is a collective's (the process-group backends' op ranges).
pub(crate) fn is_collective_op(name: &str) -> bool {
    name.starts_with("gloo:") || name.starts_with("nccl:")
}

/// Bytes a call moved: read/written for I/O, copied/set/allocated for GPU memory calls, sent
/// for collectives (count × datatype size).
pub(crate) fn bytes_moved(func: Func, event: &Event) -> u64 {
    match func.class() {
        Class::Read | Class::Write => event.arg2,
        Class::Copy | Class::Memset | Class::Alloc => event.arg,
        Class::Collective => {
            let call = GpuCall::from_event(event);
            call.arg.saturating_mul(nccl_datatype_bytes(call.aux & 0xff))
        }
        _ => 0,
    }
}

/// Size of an NCCL datatype (ncclInt8 = 0 … ncclFloat8e5m2 = 11).
pub(crate) fn nccl_datatype_bytes(datatype: u32) -> u64 {
    match datatype {
        0 | 1 | 10 | 11 => 1,
        6 | 9 => 2,
        2 | 3 | 7 => 4,
        4 | 5 | 8 => 8,
        _ => 0,
    }
}

pub(crate) fn nccl_datatype_name(datatype: u32) -> &'static str {
    match datatype {
        0 => "int8",
        1 => "uint8",
        2 => "int32",
        3 => "uint32",
        4 => "int64",
        5 => "uint64",
        6 => "float16",
        7 => "float32",
        8 => "float64",
        9 => "bfloat16",
        10 => "float8e4m3",
        11 => "float8e5m2",
        _ => "unknown",
    }
}

pub(crate) fn nccl_op_name(op: u32) -> &'static str {
    match op {
        0 => "sum",
        1 => "prod",
        2 => "max",
        3 => "min",
        4 => "avg",
        0xff => "none",
        _ => "custom",
    }
}

/// A C++ or Rust name demangled for display; other names as they are.
pub(crate) use mlprof_symbols::demangle;

//! A recorded libc, CUDA or NCCL call as a slice: named after the function, in a category per
//! API (libc calls by kind: `io`, `mmap`, `clock`, `ioctl`; complete mode's trapped system calls
//! in `syscall`, named after theirs), with the call's arguments.

use std::io;

use mlprof_format::func::{Api, Class, Func};
use mlprof_format::record::{Event, FLAG_CORRELATED, FLAG_NESTED, GpuCall, copy_direction_name};
use mlprof_trace::{ArgList, ArgShape, ArgValue, Slice, StringHandle, TraceWriter};

use super::converter::{Converter, Text, ThreadState};
use crate::run::kinds::Kind;
use crate::run::stream::Learned;
use crate::run::{PathIndex, bytes_moved, nccl_datatype_name, nccl_op_name};

/// The most arguments a call has (an NCCL collective: 10).
const MAX_ARGS: usize = 12;

pub(super) fn write<W: TraceWriter>(
    c: &mut Converter<'_, W>,
    learned: &mut Learned,
    kind: Kind,
    event: &Event,
    thread: ThreadState,
    (path, site): (Option<PathIndex>, u32),
) -> io::Result<()> {
    let Kind { func, api, .. } = kind;
    let (name, category) = match c.function_texts.get(event.kind as usize).copied().flatten() {
        // Complete mode's trapped calls are named after their system call.
        _ if func == Func::TrappedSyscall => {
            (c.text(Text::Syscall(event.extra)), c.text(Text::Literal("syscall")))
        }
        Some(texts) => texts,
        None => function_texts(c, kind, event.kind),
    };
    // A launch's grid and block dimensions: declared here to outlive the list that borrows them.
    let dimensions;
    let mut args = ArgList::<MAX_ARGS>::new();
    let mut shape = ArgShape::NONE;
    if api == Api::Libc {
        shape = libc_args(c, learned, kind, event, path, &mut args);
        shape = site_args(c, site, shape, &mut args);
    } else {
        let call = GpuCall::from_event(event);
        dimensions = [call.grid(), call.block()].map(|(x, y, z)| [x, y, z].map(u64::from));
        gpu_args(c, kind, event, &call, &dimensions, &mut args);
    }
    // A call encloses nothing recorded after it unless its thread has spans (ITT tasks, or GPU
    // calls that wrap driver calls) that may arrive later around it.
    let outermost = !thread.spans;
    let slice = Slice {
        start_ns: event.start,
        dur_ns: event.dur,
        name,
        category,
        args: args.as_slice(),
        shape,
        outermost,
    };
    c.out.slice(thread.handle, &slice)?;
    if event.flags & FLAG_CORRELATED != 0 {
        c.gpu_flow_from(event, thread.handle)?;
    }
    Ok(())
}

/// The (name, category) handles of function `kind` (the record's), interned on its first call:
/// named after the function, in a category per API, libc calls by kind.
#[cold]
fn function_texts<W: TraceWriter>(
    c: &mut Converter<'_, W>,
    Kind { func, class, api, .. }: Kind,
    kind: u16,
) -> (StringHandle, StringHandle) {
    let category = match api {
        Api::Libc => match class {
            Class::Map => "mmap",
            Class::Clock => "clock",
            Class::Ioctl => "ioctl",
            _ => "io",
        },
        Api::CudaRuntime => "cuda_runtime",
        Api::CudaDriver => "cuda_driver",
        Api::Nccl => "nccl",
        Api::Itt => unreachable!("ITT records are annotations, written by convert::itt"),
    };
    let texts = (c.text(Text::Function(func)), c.text(Text::Literal(category)));
    let kind = kind as usize;
    if c.function_texts.len() <= kind {
        c.function_texts.resize(kind + 1, None);
    }
    c.function_texts[kind] = Some(texts);
    texts
}

/// fd, return value, bytes moved and asked for, errno, the class's own fields, and the path the
/// fd named. Returns their shape: the keys depend only on the class (the function, which the
/// slice is named after), whether the call failed and whether a path was found.
fn libc_args<W: TraceWriter>(
    c: &mut Converter<'_, W>,
    learned: &mut Learned,
    Kind { class, has_path, .. }: Kind,
    event: &Event,
    // The path index of its path argument when it was found reading ahead (else looked up:
    // the same answer, as a path indexed since names the same string).
    known: Option<PathIndex>,
    args: &mut ArgList<'_, MAX_ARGS>,
) -> ArgShape {
    let shape = |path: bool| {
        ArgShape(1 << 31 | (class as u32) << 2 | u32::from(event.is_error()) << 1 | u32::from(path))
    };
    if class == Class::Syscall {
        // A trapped system call (complete mode): its number, its first argument (the low 32
        // bits, kept in `fd`) and second, the kernel's return value (-errno on failure).
        args.push("nr", ArgValue::UInt(event.extra.into()));
        args.push("arg0", ArgValue::Int(event.fd.into()));
        args.push("arg1", ArgValue::Hex(event.arg));
        args.push("ret", ArgValue::Int(event.ret));
        if event.is_error() {
            args.push("errno", ArgValue::Int(event.errno.into()));
        }
        return shape(false);
    }
    args.push("fd", ArgValue::Int(event.fd.into()));
    args.push("ret", ArgValue::Int(event.ret));
    if matches!(class, Class::Read | Class::Write) {
        // Bytes moved (`bytes_moved` of a read or write) and asked for.
        args.push("bytes", ArgValue::UInt(event.arg2));
        args.push("asked", ArgValue::UInt(event.arg));
    }
    if event.is_error() {
        args.push("errno", ArgValue::Int(event.errno.into()));
    }
    match class {
        Class::Map => args.push("length", ArgValue::UInt(event.arg)),
        Class::Seek => {
            args.push("offset", ArgValue::Int(event.arg as i64));
            args.push("whence", ArgValue::UInt(event.extra.into()));
        }
        Class::Clock => args.push("clock_id", ArgValue::UInt(event.extra.into())),
        Class::Ioctl => args.push("request", ArgValue::Hex(event.arg)),
        _ => {}
    }
    let path = match class {
        // A call with a path argument names it: an open its own path (a failed one too, when
        // it got that far), a stat or an unlink the path it was given.
        _ if has_path && event.arg2 != 0 => {
            Some(match known.or_else(|| learned.fds.path_index(event.arg2)) {
                Some(index) => c.path_text(&learned.fds, index),
                None => c.text(Text::Run(event.arg2)),
            })
        }
        Class::Open | Class::Clock | Class::Syscall | Class::Load => None,
        _ if event.fd < 0 => None,
        _ => learned
            .fds
            .lookup_cached(c.meta, event.pid, event.fd, event.start, &mut learned.fd_cache)
            .map(|index| c.path_text(&learned.fds, index)),
    };
    if let Some(path) = path {
        args.push("path", ArgValue::Interned(path));
    }
    shape(path.is_some())
}

/// The call site's arguments (`--sites`): `site_file`, `site_line`, `site_function`, for a
/// call's slice and a span's; the shape with its site bit set when they were pushed (the keys
/// then include them).
pub(super) fn site_args<W: TraceWriter, const N: usize>(
    c: &mut Converter<'_, W>,
    site: u32,
    shape: ArgShape,
    args: &mut ArgList<'_, N>,
) -> ArgShape {
    let Some(info) = c.meta.sites.get(&site) else { return shape };
    let (file, function, line) = (info.file, info.function, info.line);
    args.push("site_file", ArgValue::Interned(c.text(Text::Run(file))));
    args.push("site_line", ArgValue::UInt(line.into()));
    args.push("site_function", ArgValue::Interned(c.text(Text::Run(function))));
    ArgShape(shape.0 | 1 << 30)
}

/// Arguments of a CUDA/NCCL call (see `GpuCall` for where each field lives).
fn gpu_args<'a, W: TraceWriter>(
    c: &mut Converter<'_, W>,
    Kind { func, class, .. }: Kind,
    event: &Event,
    call: &GpuCall,
    [grid, block]: &'a [[u64; 3]; 2],
    args: &mut ArgList<'a, MAX_ARGS>,
) {
    args.push("status", ArgValue::Int(call.status.into()));
    args.push("device", ArgValue::Int(call.device.into()));
    if call.stream != 0 {
        args.push("stream", ArgValue::Hex(call.stream));
    }
    if call.flags & FLAG_NESTED != 0 {
        args.push("nested", ArgValue::Bool(true));
    }
    match class {
        Class::Launch => {
            args.push("kernel", ArgValue::Interned(c.text(Text::Kernel(call.pid, call.object))));
            args.push("grid", ArgValue::UInts(grid));
            args.push("block", ArgValue::UInts(block));
        }
        Class::Copy => {
            args.push("bytes", ArgValue::UInt(call.arg));
            args.push("direction", ArgValue::Str(copy_direction_name(call.aux)));
        }
        Class::Memset => args.push("bytes", ArgValue::UInt(call.arg)),
        Class::Alloc => {
            args.push("bytes", ArgValue::UInt(call.arg));
            args.push("ptr", ArgValue::Hex(call.object));
        }
        Class::Free => args.push("ptr", ArgValue::Hex(call.object)),
        Class::Collective => {
            args.push("count", ArgValue::UInt(call.arg));
            args.push("datatype", ArgValue::Str(nccl_datatype_name(call.aux & 0xff)));
            args.push("bytes", ArgValue::UInt(bytes_moved(func, event)));
            args.push("comm", ArgValue::Hex(call.object));
            let op = (call.aux >> 8) & 0xff;
            // 0xff: a call without a reduction (broadcast, send, receive).
            if op != 0xff {
                args.push("op", ArgValue::Str(nccl_op_name(op)));
            }
            if matches!(func, Func::NcclSend | Func::NcclRecv) {
                args.push("peer", ArgValue::UInt((call.aux >> 16).into()));
            } else if matches!(func, Func::NcclBroadcast | Func::NcclReduce) {
                args.push("root", ArgValue::UInt((call.aux >> 16).into()));
            }
        }
        Class::Comm => {
            args.push("ranks", ArgValue::UInt(call.arg));
            args.push("rank", ArgValue::UInt(call.aux.into()));
            args.push("comm", ArgValue::Hex(call.object));
        }
        Class::SetDevice => args.push("set_device", ArgValue::UInt(call.arg)),
        Class::GpuSync | Class::GpuEvent | Class::GraphLaunch if call.object != 0 => {
            args.push("object", ArgValue::Hex(call.object))
        }
        _ => {}
    }
}

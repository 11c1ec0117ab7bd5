//! NCCL hooks (libnccl.so.2): collectives, point-to-point, groups and communicators.

#![allow(non_snake_case)]

use core::ffi::{c_int, c_void};

use mlprof_format::record::GpuCall;

use crate::gpu::gpu_hook;

type Comm = *mut c_void;
type Stream = *mut c_void;

/// `ncclUniqueId`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    internal: [u8; 128],
}

/// `aux` of a collective: datatype | op << 8 | peer or root << 16.
fn collective_aux(datatype: c_int, op: c_int, peer: c_int) -> u32 {
    (datatype as u32 & 0xff) | ((op as u32 & 0xff) << 8) | ((peer as u32 & 0xffff) << 16)
}

fn collective(count: usize, datatype: c_int, op: c_int, peer: c_int, comm: Comm, stream: Stream) -> GpuCall {
    GpuCall {
        aux: collective_aux(datatype, op, peer),
        arg: count as u64,
        stream: stream as u64,
        object: comm as u64,
        ..GpuCall::default()
    }
}

/// No reduction operation (op field of non-reducing calls).
const NO_OP: c_int = 0xff;

gpu_hook!(outer_call, crate::real::NCCL,
    ncclAllReduce => NcclAllReduce(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, op: c_int, comm: Comm, stream: Stream),
    |status| collective(count, datatype, op, 0, comm, stream));
gpu_hook!(outer_call, crate::real::NCCL,
    ncclAllGather => NcclAllGather(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, comm: Comm, stream: Stream),
    |status| collective(count, datatype, NO_OP, 0, comm, stream));
gpu_hook!(outer_call, crate::real::NCCL,
    ncclReduceScatter => NcclReduceScatter(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, op: c_int, comm: Comm, stream: Stream),
    |status| collective(count, datatype, op, 0, comm, stream));
gpu_hook!(outer_call, crate::real::NCCL,
    ncclBroadcast => NcclBroadcast(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: Comm, stream: Stream),
    |status| collective(count, datatype, NO_OP, root, comm, stream));
gpu_hook!(outer_call, crate::real::NCCL,
    ncclReduce => NcclReduce(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, op: c_int, root: c_int, comm: Comm, stream: Stream),
    |status| collective(count, datatype, op, root, comm, stream));
gpu_hook!(outer_call, crate::real::NCCL,
    ncclSend => NcclSend(send: *const c_void, count: usize, datatype: c_int, peer: c_int, comm: Comm, stream: Stream),
    |status| collective(count, datatype, NO_OP, peer, comm, stream));
gpu_hook!(outer_call, crate::real::NCCL,
    ncclRecv => NcclRecv(recv: *mut c_void, count: usize, datatype: c_int, peer: c_int, comm: Comm, stream: Stream),
    |status| collective(count, datatype, NO_OP, peer, comm, stream));
gpu_hook!(outer_call, crate::real::NCCL, ncclGroupStart => NcclGroupStart(), |status| GpuCall::default());
gpu_hook!(outer_call, crate::real::NCCL, ncclGroupEnd => NcclGroupEnd(), |status| GpuCall::default());

/// The communicator an init call stored, when it succeeded.
fn created(status: c_int, out: *mut Comm) -> u64 {
    if status != 0 || out.is_null() {
        return 0;
    }
    // Safety: on success NCCL stored the communicator through the application's out pointer.
    unsafe { *out as u64 }
}

gpu_hook!(outer_call, crate::real::NCCL,
    ncclCommInitRank => NcclCommInitRank(out: *mut Comm, nranks: c_int, id: UniqueId, rank: c_int),
    |status| GpuCall { aux: rank as u32, arg: nranks as u64, object: created(status, out), ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::NCCL,
    ncclCommInitRankConfig => NcclCommInitRankConfig(out: *mut Comm, nranks: c_int, id: UniqueId, rank: c_int, config: *mut c_void),
    |status| GpuCall { aux: rank as u32, arg: nranks as u64, object: created(status, out), ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::NCCL,
    ncclCommInitRankScalable => NcclCommInitRankScalable(out: *mut Comm, nranks: c_int, rank: c_int, n_ids: c_int, ids: *mut UniqueId, config: *mut c_void),
    |status| GpuCall { aux: rank as u32, arg: nranks as u64, object: created(status, out), ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::NCCL,
    ncclCommInitAll => NcclCommInitAll(out: *mut Comm, ndev: c_int, devices: *const c_int),
    |status| GpuCall { arg: ndev as u64, object: created(status, out), ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::NCCL, ncclCommDestroy => NcclCommDestroy(comm: Comm),
    |status| GpuCall { object: comm as u64, ..GpuCall::default() });
gpu_hook!(outer_call, crate::real::NCCL, ncclCommAbort => NcclCommAbort(comm: Comm),
    |status| GpuCall { object: comm as u64, ..GpuCall::default() });

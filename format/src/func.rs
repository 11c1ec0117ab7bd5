//! The intercepted functions. Ids are stable: new functions get new ids, old ids are never
//! reused (readers name unknown ids `func#N` and skip them in per-function tables).

/// What a function does, for grouping in reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// open/openat/creat/fopen: `arg2` holds the path string id.
    Open,
    /// read/pread/readv/fread: `arg`/`arg2` are bytes asked/done.
    Read,
    /// write/pwrite/writev/fwrite: `arg`/`arg2` are bytes asked/done.
    Write,
    /// close/fclose.
    Close,
    /// lseek.
    Seek,
    /// fsync/fdatasync.
    Sync,
    /// mmap/munmap.
    Map,
    /// clock_gettime/gettimeofday (kept as per-thread aggregates unless `MLPROF_CLOCK=events`).
    Clock,
    /// ioctl.
    Ioctl,
    /// GPU kernel launches (runtime and driver).
    Launch,
    /// Host↔device and device↔device copies.
    Copy,
    /// cudaMemset*: device memory filled (`arg` = bytes).
    Memset,
    /// Device, host-pinned or stream-ordered allocations (`arg` = bytes, `object` = pointer).
    Alloc,
    /// The matching frees (`object` = pointer freed).
    Free,
    /// Calls that wait for the GPU (stream, event, device, context synchronization).
    GpuSync,
    /// Event record/query, stream query and stream-waits-on-event (do not block the host).
    GpuEvent,
    /// CUDA graph launches (`object` = the graph executable).
    GraphLaunch,
    /// cudaSetDevice (`arg` = device): changes the device later GPU records carry.
    SetDevice,
    /// NCCL collectives and point-to-point calls.
    Collective,
    /// ncclGroupStart/End.
    Group,
    /// NCCL communicator creation and destruction.
    Comm,
    /// An annotated interval (ITT task or frame): its own name is in the record.
    Span,
    /// An annotated instant (ITT marker, pause, resume).
    Instant,
    /// The stat family, statx, access/faccessat: metadata looked up by path (`arg2` = path id,
    /// `fd` = the directory fd of an `*at` call, `AT_FDCWD`, or -1) or by fd (`fd`).
    Stat,
    /// Directory reads: readdir/readdir64 (`extra` = 1 when the call refilled glibc's buffer,
    /// i.e. made a `getdents64`), getdents64, fdopendir; `fd` = the directory's fd.
    Dir,
    /// Namespace changes: mkdir, rmdir, unlink, rename and their `*at` forms (`arg2` = path id,
    /// the source path for a rename).
    Namespace,
    /// Descriptor control: dup/dup2/dup3 and fcntl (`fd` = the fd asked about, `ret` = the new fd
    /// of a dup, `extra` = fcntl's command).
    Fd,
    /// File size, space and caching: ftruncate, fallocate, posix_fallocate, posix_fadvise
    /// (`arg` = offset or length, `arg2` = length, `extra` = mode or advice).
    Space,
    /// In-kernel copies: sendfile, copy_file_range (`fd` = destination, `extra` = source fd,
    /// `arg`/`arg2` = bytes asked/done).
    Transfer,
    /// Library loading: dlopen (`arg2` = path id, `ret` = handle) and dlclose (`arg` = handle).
    Load,
    /// A system call trapped in complete mode (reserved: no preload writes it yet): `extra` = the
    /// system call number, `arg`/`arg2` = its first two arguments, `ret` = the kernel's return.
    Syscall,
}

/// The library an intercepted function belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    /// The C library (file I/O, mmap, clocks, ioctl); ids below 100, and 700..=899 (metadata,
    /// directories, descriptors, library loading, trapped system calls).
    Libc,
    /// The CUDA runtime (`libcudart`); ids 100..=299.
    CudaRuntime,
    /// The CUDA driver (`libcuda`); ids 300..=499.
    CudaDriver,
    /// NCCL (`libnccl`); ids 500..=599.
    Nccl,
    /// Intel ITT annotations received by mlprof's collector; ids 600..=699.
    Itt,
}

macro_rules! funcs {
    ($( $variant:ident = $id:literal, $name:literal, $class:ident; )*) => {
        /// An intercepted function; the discriminant is the `kind` of its event records.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u16)]
        pub enum Func {
            $(
                #[doc = concat!(
                    "`", $name, "` (id ", stringify!($id), ", [`Class::", stringify!($class), "`])."
                )]
                $variant = $id,
            )*
        }

        impl Func {
            /// Every function, in id order.
            pub const ALL: &[Func] = &[ $( Func::$variant, )* ];

            /// The function with id `id` (an event's `kind`); `None` for ids this build does
            /// not know (newer writers, control kinds).
            pub const fn from_id(id: u16) -> Option<Func> {
                match id { $( $id => Some(Func::$variant), )* _ => None }
            }

            /// The symbol the application called.
            pub const fn name(self) -> &'static str {
                match self { $( Func::$variant => $name, )* }
            }

            /// What the function does, for grouping in reports.
            pub const fn class(self) -> Class {
                match self { $( Func::$variant => Class::$class, )* }
            }
        }
    };
}

funcs! {
    Open = 1, "open", Open;
    Open64 = 2, "open64", Open;
    Openat = 3, "openat", Open;
    Openat64 = 4, "openat64", Open;
    Creat = 5, "creat", Open;
    Fopen = 6, "fopen", Open;
    Fopen64 = 7, "fopen64", Open;
    Read = 10, "read", Read;
    Pread = 11, "pread", Read;
    Pread64 = 12, "pread64", Read;
    Readv = 13, "readv", Read;
    Preadv = 14, "preadv", Read;
    Fread = 15, "fread", Read;
    Write = 20, "write", Write;
    Pwrite = 21, "pwrite", Write;
    Pwrite64 = 22, "pwrite64", Write;
    Writev = 23, "writev", Write;
    Pwritev = 24, "pwritev", Write;
    Fwrite = 25, "fwrite", Write;
    Close = 30, "close", Close;
    Fclose = 31, "fclose", Close;
    Lseek = 40, "lseek", Seek;
    Lseek64 = 41, "lseek64", Seek;
    Fsync = 50, "fsync", Sync;
    Fdatasync = 51, "fdatasync", Sync;
    Mmap = 60, "mmap", Map;
    Mmap64 = 61, "mmap64", Map;
    Munmap = 62, "munmap", Map;
    ClockGettime = 70, "clock_gettime", Clock;
    Gettimeofday = 71, "gettimeofday", Clock;
    Ioctl = 80, "ioctl", Ioctl;
    // CUDA runtime (libcudart), 100..=299.
    CudaLaunchKernel = 100, "cudaLaunchKernel", Launch;
    CudaLaunchKernelPtsz = 101, "cudaLaunchKernel_ptsz", Launch;
    CudaLaunchKernelExC = 102, "cudaLaunchKernelExC", Launch;
    CudaLaunchKernelExCPtsz = 103, "cudaLaunchKernelExC_ptsz", Launch;
    CudaLaunchCooperativeKernel = 104, "cudaLaunchCooperativeKernel", Launch;
    CudaLaunchCooperativeKernelPtsz = 105, "cudaLaunchCooperativeKernel_ptsz", Launch;
    CudaMemcpy = 110, "cudaMemcpy", Copy;
    CudaMemcpyPtds = 111, "cudaMemcpy_ptds", Copy;
    CudaMemcpyAsync = 112, "cudaMemcpyAsync", Copy;
    CudaMemcpyAsyncPtsz = 113, "cudaMemcpyAsync_ptsz", Copy;
    CudaMemcpy2D = 114, "cudaMemcpy2D", Copy;
    CudaMemcpy2DPtds = 115, "cudaMemcpy2D_ptds", Copy;
    CudaMemcpy2DAsync = 116, "cudaMemcpy2DAsync", Copy;
    CudaMemcpy2DAsyncPtsz = 117, "cudaMemcpy2DAsync_ptsz", Copy;
    CudaMemset = 120, "cudaMemset", Memset;
    CudaMemsetPtds = 121, "cudaMemset_ptds", Memset;
    CudaMemsetAsync = 122, "cudaMemsetAsync", Memset;
    CudaMemsetAsyncPtsz = 123, "cudaMemsetAsync_ptsz", Memset;
    CudaMemset2D = 124, "cudaMemset2D", Memset;
    CudaMemset2DPtds = 125, "cudaMemset2D_ptds", Memset;
    CudaMemset2DAsync = 126, "cudaMemset2DAsync", Memset;
    CudaMemset2DAsyncPtsz = 127, "cudaMemset2DAsync_ptsz", Memset;
    CudaMalloc = 130, "cudaMalloc", Alloc;
    CudaFree = 131, "cudaFree", Free;
    CudaMallocAsync = 132, "cudaMallocAsync", Alloc;
    CudaMallocAsyncPtsz = 133, "cudaMallocAsync_ptsz", Alloc;
    CudaFreeAsync = 134, "cudaFreeAsync", Free;
    CudaFreeAsyncPtsz = 135, "cudaFreeAsync_ptsz", Free;
    CudaMallocHost = 136, "cudaMallocHost", Alloc;
    CudaHostAlloc = 137, "cudaHostAlloc", Alloc;
    CudaFreeHost = 138, "cudaFreeHost", Free;
    CudaStreamSynchronize = 140, "cudaStreamSynchronize", GpuSync;
    CudaStreamSynchronizePtsz = 141, "cudaStreamSynchronize_ptsz", GpuSync;
    CudaDeviceSynchronize = 142, "cudaDeviceSynchronize", GpuSync;
    CudaEventSynchronize = 143, "cudaEventSynchronize", GpuSync;
    CudaEventRecord = 144, "cudaEventRecord", GpuEvent;
    CudaEventRecordPtsz = 145, "cudaEventRecord_ptsz", GpuEvent;
    CudaEventQuery = 146, "cudaEventQuery", GpuEvent;
    CudaStreamWaitEvent = 147, "cudaStreamWaitEvent", GpuEvent;
    CudaStreamWaitEventPtsz = 148, "cudaStreamWaitEvent_ptsz", GpuEvent;
    CudaStreamQuery = 149, "cudaStreamQuery", GpuEvent;
    CudaStreamQueryPtsz = 150, "cudaStreamQuery_ptsz", GpuEvent;
    CudaGraphLaunch = 151, "cudaGraphLaunch", GraphLaunch;
    CudaGraphLaunchPtsz = 152, "cudaGraphLaunch_ptsz", GraphLaunch;
    CudaSetDevice = 153, "cudaSetDevice", SetDevice;
    // CUDA driver (libcuda), 300..=499.
    CuLaunchKernel = 300, "cuLaunchKernel", Launch;
    CuLaunchKernelPtsz = 301, "cuLaunchKernel_ptsz", Launch;
    CuLaunchKernelEx = 302, "cuLaunchKernelEx", Launch;
    CuLaunchKernelExPtsz = 303, "cuLaunchKernelEx_ptsz", Launch;
    CuMemcpy = 310, "cuMemcpy", Copy;
    CuMemcpyPtds = 311, "cuMemcpy_ptds", Copy;
    CuMemcpyAsync = 312, "cuMemcpyAsync", Copy;
    CuMemcpyAsyncPtsz = 313, "cuMemcpyAsync_ptsz", Copy;
    CuMemcpyHtoD = 314, "cuMemcpyHtoD_v2", Copy;
    CuMemcpyHtoDPtds = 315, "cuMemcpyHtoD_v2_ptds", Copy;
    CuMemcpyDtoH = 316, "cuMemcpyDtoH_v2", Copy;
    CuMemcpyDtoHPtds = 317, "cuMemcpyDtoH_v2_ptds", Copy;
    CuMemcpyDtoD = 318, "cuMemcpyDtoD_v2", Copy;
    CuMemcpyDtoDPtds = 319, "cuMemcpyDtoD_v2_ptds", Copy;
    CuMemcpyHtoDAsync = 320, "cuMemcpyHtoDAsync_v2", Copy;
    CuMemcpyHtoDAsyncPtsz = 321, "cuMemcpyHtoDAsync_v2_ptsz", Copy;
    CuMemcpyDtoHAsync = 322, "cuMemcpyDtoHAsync_v2", Copy;
    CuMemcpyDtoHAsyncPtsz = 323, "cuMemcpyDtoHAsync_v2_ptsz", Copy;
    CuMemcpyDtoDAsync = 324, "cuMemcpyDtoDAsync_v2", Copy;
    CuMemcpyDtoDAsyncPtsz = 325, "cuMemcpyDtoDAsync_v2_ptsz", Copy;
    CuMemAlloc = 330, "cuMemAlloc_v2", Alloc;
    CuMemFree = 331, "cuMemFree_v2", Free;
    CuMemAllocHost = 332, "cuMemAllocHost_v2", Alloc;
    CuMemFreeHost = 333, "cuMemFreeHost", Free;
    CuMemAllocAsync = 334, "cuMemAllocAsync", Alloc;
    CuMemAllocAsyncPtsz = 335, "cuMemAllocAsync_ptsz", Alloc;
    CuMemFreeAsync = 336, "cuMemFreeAsync", Free;
    CuMemFreeAsyncPtsz = 337, "cuMemFreeAsync_ptsz", Free;
    CuStreamSynchronize = 340, "cuStreamSynchronize", GpuSync;
    CuStreamSynchronizePtsz = 341, "cuStreamSynchronize_ptsz", GpuSync;
    CuCtxSynchronize = 342, "cuCtxSynchronize", GpuSync;
    CuEventSynchronize = 343, "cuEventSynchronize", GpuSync;
    CuEventRecord = 344, "cuEventRecord", GpuEvent;
    CuEventRecordPtsz = 345, "cuEventRecord_ptsz", GpuEvent;
    CuGraphLaunch = 346, "cuGraphLaunch", GraphLaunch;
    CuGraphLaunchPtsz = 347, "cuGraphLaunch_ptsz", GraphLaunch;
    // NCCL (libnccl), 500..=599.
    NcclAllReduce = 500, "ncclAllReduce", Collective;
    NcclAllGather = 501, "ncclAllGather", Collective;
    NcclReduceScatter = 502, "ncclReduceScatter", Collective;
    NcclBroadcast = 503, "ncclBroadcast", Collective;
    NcclReduce = 504, "ncclReduce", Collective;
    NcclSend = 505, "ncclSend", Collective;
    NcclRecv = 506, "ncclRecv", Collective;
    NcclGroupStart = 510, "ncclGroupStart", Group;
    NcclGroupEnd = 511, "ncclGroupEnd", Group;
    NcclCommInitRank = 520, "ncclCommInitRank", Comm;
    NcclCommInitRankConfig = 521, "ncclCommInitRankConfig", Comm;
    NcclCommInitAll = 522, "ncclCommInitAll", Comm;
    NcclCommInitRankScalable = 523, "ncclCommInitRankScalable", Comm;
    NcclCommDestroy = 524, "ncclCommDestroy", Comm;
    NcclCommAbort = 525, "ncclCommAbort", Comm;
    // ITT annotations (mlprof as an ITT collector), 600..=699.
    IttTask = 600, "itt_task", Span;
    IttFrame = 601, "itt_frame", Span;
    IttMarker = 602, "itt_marker", Instant;
    IttPause = 603, "itt_pause", Instant;
    IttResume = 604, "itt_resume", Instant;
    // The C library, continued (700..=899): metadata and namespace calls, directories,
    // descriptors, library loading, and the system calls complete mode traps.
    Stat = 700, "stat", Stat;
    Stat64 = 701, "stat64", Stat;
    Lstat = 702, "lstat", Stat;
    Lstat64 = 703, "lstat64", Stat;
    Fstat = 704, "fstat", Stat;
    Fstat64 = 705, "fstat64", Stat;
    Fstatat = 706, "fstatat", Stat;
    Fstatat64 = 707, "fstatat64", Stat;
    Statx = 708, "statx", Stat;
    Xstat = 709, "__xstat", Stat;
    Xstat64 = 710, "__xstat64", Stat;
    Lxstat = 711, "__lxstat", Stat;
    Lxstat64 = 712, "__lxstat64", Stat;
    Fxstat = 713, "__fxstat", Stat;
    Fxstat64 = 714, "__fxstat64", Stat;
    Fxstatat = 715, "__fxstatat", Stat;
    Fxstatat64 = 716, "__fxstatat64", Stat;
    Access = 720, "access", Stat;
    Faccessat = 721, "faccessat", Stat;
    Opendir = 730, "opendir", Open;
    Fdopendir = 731, "fdopendir", Dir;
    Readdir = 732, "readdir", Dir;
    Readdir64 = 733, "readdir64", Dir;
    Closedir = 734, "closedir", Close;
    Getdents64 = 735, "getdents64", Dir;
    Mkdir = 740, "mkdir", Namespace;
    Mkdirat = 741, "mkdirat", Namespace;
    Rmdir = 742, "rmdir", Namespace;
    Unlink = 743, "unlink", Namespace;
    Unlinkat = 744, "unlinkat", Namespace;
    Rename = 745, "rename", Namespace;
    Renameat = 746, "renameat", Namespace;
    Dup = 750, "dup", Fd;
    Dup2 = 751, "dup2", Fd;
    Dup3 = 752, "dup3", Fd;
    Fcntl = 753, "fcntl", Fd;
    Fcntl64 = 754, "fcntl64", Fd;
    Ftruncate = 760, "ftruncate", Space;
    Ftruncate64 = 761, "ftruncate64", Space;
    Fallocate = 762, "fallocate", Space;
    Fallocate64 = 763, "fallocate64", Space;
    PosixFallocate = 764, "posix_fallocate", Space;
    PosixFallocate64 = 765, "posix_fallocate64", Space;
    PosixFadvise = 766, "posix_fadvise", Space;
    PosixFadvise64 = 767, "posix_fadvise64", Space;
    SyncFileRange = 768, "sync_file_range", Sync;
    Sendfile = 770, "sendfile", Transfer;
    Sendfile64 = 771, "sendfile64", Transfer;
    CopyFileRange = 772, "copy_file_range", Transfer;
    Isatty = 780, "isatty", Ioctl;
    Tcgetattr = 781, "tcgetattr", Ioctl;
    Dlopen = 790, "dlopen", Load;
    Dlclose = 791, "dlclose", Load;
    TrappedSyscall = 800, "trapped_syscall", Syscall;
}

/// Kinds below this may be intercepted functions (`Func` ids are smaller).
const FUNC_ID_LIMIT: usize = 1024;

/// `KIND_HAS_PATH[kind]`: whether `kind` is a function whose `arg2` holds a path id.
static KIND_HAS_PATH: [bool; FUNC_ID_LIMIT] = {
    let mut table = [false; FUNC_ID_LIMIT];
    let mut i = 0;
    while i < Func::ALL.len() {
        let func = Func::ALL[i];
        assert!((func as usize) < FUNC_ID_LIMIT, "a function id outgrew KIND_HAS_PATH");
        table[func as usize] = func.has_path();
        i += 1;
    }
    table
};

impl Func {
    /// Whether the call transfers bytes (its `arg`/`arg2` are bytes asked/done).
    pub const fn moves_bytes(self) -> bool {
        matches!(self.class(), Class::Read | Class::Write | Class::Transfer)
    }

    /// Whether `arg2` holds an interned path id (when not 0: a call by fd, or a path that
    /// could not be read, has none).
    pub const fn has_path(self) -> bool {
        match self.class() {
            Class::Open | Class::Namespace => true,
            Class::Stat => !matches!(self, Func::Fstat | Func::Fstat64 | Func::Fxstat | Func::Fxstat64),
            Class::Load => matches!(self, Func::Dlopen),
            _ => false,
        }
    }

    /// Whether an event of kind `kind` names a path in `arg2` (`from_id` then `has_path`, by
    /// table). The collector asks this of every record it drains: through the two `match`es
    /// (a search over 180 ids each, not inlined across crates) it was a tenth of the
    /// collector's CPU at a million records a second.
    #[inline]
    pub fn kind_has_path(kind: u16) -> bool {
        KIND_HAS_PATH.get(kind as usize).copied().unwrap_or(false)
    }

    /// The library the function belongs to (from its id range).
    pub const fn api(self) -> Api {
        match self as u16 {
            100..=299 => Api::CudaRuntime,
            300..=499 => Api::CudaDriver,
            500..=599 => Api::Nccl,
            600..=699 => Api::Itt,
            _ => Api::Libc,
        }
    }

    /// Whether the host thread waits for the GPU inside the call: synchronizations and the
    /// copies that are not `Async` (those block until the copy is done).
    pub fn blocks_host(self) -> bool {
        match self.class() {
            Class::GpuSync => true,
            Class::Copy => !self.name().contains("Async"),
            _ => false,
        }
    }

    /// The function whose symbol is `name` (exact match), as users name it on command lines.
    pub fn from_name(name: &str) -> Option<Func> {
        Func::ALL.iter().copied().find(|f| f.name() == name)
    }
}

/// Aggregate slot for `gettimeofday` in a lane's aggregate table; clock ids 0..=11 use their own
/// id as slot, any other clock id uses [`AGG_SLOT_OTHER_CLOCK`].
pub const AGG_SLOT_GETTIMEOFDAY: usize = 13;
/// Aggregate slot for `clock_gettime` with a clock id outside 0..=11.
pub const AGG_SLOT_OTHER_CLOCK: usize = 12;
/// Number of aggregate slots per lane.
pub const AGG_SLOTS: usize = 16;

/// The function and clock id an aggregate slot stands for.
pub fn agg_slot_meaning(slot: usize) -> Option<(Func, Option<i32>)> {
    match slot {
        0..=11 => Some((Func::ClockGettime, Some(slot as i32))),
        AGG_SLOT_OTHER_CLOCK => Some((Func::ClockGettime, None)),
        AGG_SLOT_GETTIMEOFDAY => Some((Func::Gettimeofday, None)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_table_agrees_with_has_path() {
        for kind in 0..=u16::MAX {
            let expected = Func::from_id(kind).is_some_and(Func::has_path);
            assert_eq!(Func::kind_has_path(kind), expected, "kind {kind}");
        }
    }

    #[test]
    fn ids_round_trip_and_names_are_unique() {
        let mut names = std::collections::HashSet::new();
        for &f in Func::ALL {
            assert_eq!(Func::from_id(f as u16), Some(f));
            assert!(names.insert(f.name()));
            assert_eq!(Func::from_name(f.name()), Some(f));
        }
        assert_eq!(Func::from_id(0), None);
        assert_eq!(Func::from_id(9999), None);
    }

    #[test]
    fn the_continued_libc_range_is_libc() {
        for &f in Func::ALL {
            if (700..=899).contains(&(f as u16)) {
                assert_eq!(f.api(), Api::Libc, "{}", f.name());
            }
        }
        assert!(Func::Stat.has_path() && Func::Statx.has_path() && Func::Access.has_path());
        assert!(!Func::Fstat64.has_path() && !Func::Fxstat.has_path() && !Func::Dlclose.has_path());
        assert!(Func::Opendir.has_path() && Func::Rename.has_path() && Func::Dlopen.has_path());
        assert!(Func::Sendfile.moves_bytes() && !Func::Stat.moves_bytes());
    }
}

//! Finding libcupti and its entry points, without allocating: `MLPROF_CUPTI`'s path, else the
//! application's own copy (`RTLD_NOLOAD`), else the one beside the CUDA runtime in use (the
//! CUDA wheels: `nvidia/cu13/lib/libcupti.so.13`, `nvidia/cuda_cupti/lib/libcupti.so.12` beside
//! `nvidia/cuda_runtime/lib/`), else in `$CUDA_HOME` (or `$CUDA_PATH`): `extras/CUPTI/lib64`,
//! `lib64`, `lib`; else the loader's search (`LD_LIBRARY_PATH`, ld.so.cache), else
//! `/usr/local/cuda` likewise (a program built by nvcc links the runtime statically: there is
//! no runtime library to look beside). Its major version must be the CUDA runtime's (a CUPTI newer than the driver answers NOT_INITIALIZED; an older one
//! misreads the records), so only `libcupti.so.<major>` of that major is looked for.

use core::ffi::{CStr, c_char, c_int, c_void};

use mlprof_format::gpu::GpuTimelineState;

use crate::real::{CUDA_DRIVER, CUDA_RUNTIME, Real, as_fn, glibc_dlsym};

/// `void bufferRequested(uint8_t **buffer, size_t *size, size_t *maxNumRecords)`.
pub type RequestFn = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
/// `void bufferCompleted(CUcontext, uint32_t streamId, uint8_t *buffer, size_t size, size_t valid)`.
pub type CompleteFn = unsafe extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);
/// `uint64_t timestamp(void)`.
pub type TimestampFn = unsafe extern "C" fn() -> u64;
/// `void callback(void *userdata, CUpti_CallbackDomain, CUpti_CallbackId, const void *data)`.
pub type CallbackFn = unsafe extern "C" fn(*mut c_void, u32, u32, *const u8);
/// `void bufferRequested(uint8_t **buffer, size_t *size, size_t *maxNumRecords,
/// CUpti_BufferCallbackRequestInfo *)`: a subscriber's (`_v2`).
pub type RequestV2Fn = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize, *mut c_void);
/// `void bufferCompleted(uint8_t *buffer, size_t size, size_t validSize,
/// CUpti_BufferCallbackCompleteInfo *)`: a subscriber's (`_v2`; no context or stream).
pub type CompleteV2Fn = unsafe extern "C" fn(*mut u8, usize, usize, *mut c_void);

/// The CUPTI API version from which the multi-subscriber `_v2` API is no longer a beta (13.3;
/// `cuptiGetTimestamp_v2` and `cuptiActivityGetNextRecord_v2` first appear there). It also
/// needs driver r610+, which only `cuptiSubscribe_v2` itself can tell.
pub const MULTI_SUBSCRIBER_VERSION: u32 = 130_300;

/// `CUpti_SubscriberParams` (cupti_callbacks.h, CUPTI 13.2+).
#[repr(C)]
pub struct SubscriberParams {
    pub struct_size: usize,
    /// Shown by CUPTI as "CUPTI for <name>"; copied by CUPTI.
    pub name: *const c_char,
    /// Where CUPTI names the tool that holds CUPTI when it answers 39 (may be null).
    pub old_name: *mut c_char,
    pub old_name_size: usize,
    /// 1: multiple subscribers allowed (a process-wide choice, made by the first subscriber).
    pub allow_multiple: u8,
}

/// `CUpti_SubscriberParams_STRUCT_SIZE`: the struct up to and including `allowMultipleSubscribers`
/// (CUPTI reads only the fields a size covers).
pub const SUBSCRIBER_PARAMS_SIZE: usize = core::mem::offset_of!(SubscriberParams, allow_multiple) + 1;

/// Whether a `CUpti_SubscriberParams` a caller passes to `cuptiSubscribe_v2` asks for multiple
/// subscribers (null, or a size without the field: it does not).
///
/// # Safety
/// `params` is null or points to the caller's struct of at least the size it states.
pub unsafe fn allows_multiple(params: *const u8) -> bool {
    if params.is_null() {
        return false;
    }
    // Safety: the struct begins with its size (the caller's promise, as CUPTI requires).
    let size = unsafe { (params as *const usize).read_unaligned() };
    // Safety: inside the size the caller stated.
    size >= SUBSCRIBER_PARAMS_SIZE && unsafe { params.add(SUBSCRIBER_PARAMS_SIZE - 1).read() } == 1
}

/// The subscriber-scoped entry points of CUPTI 13.3's multi-subscriber API (cupti_activity.h,
/// cupti_callbacks.h), all taking our `CUpti_SubscriberHandle` first where they take one.
#[derive(Clone, Copy)]
pub struct V2Api {
    pub subscribe: unsafe extern "C" fn(
        *mut *mut c_void,
        Option<CallbackFn>,
        *mut c_void,
        *mut SubscriberParams,
    ) -> c_int,
    pub register_callbacks: unsafe extern "C" fn(*mut c_void, RequestV2Fn, CompleteV2Fn) -> c_int,
    /// `(subscriber, kind, CUpti_ActivityConfig*)`: a null config collects whole records.
    pub enable: unsafe extern "C" fn(*mut c_void, u32, *mut c_void) -> c_int,
    pub disable: unsafe extern "C" fn(*mut c_void, u32, *mut c_void) -> c_int,
    pub next_record: unsafe extern "C" fn(*mut c_void, *mut u8, usize, *mut *mut u8) -> c_int,
    pub get_timestamp: unsafe extern "C" fn(*mut c_void, *mut u64) -> c_int,
    /// `(subscriber, context, stream, size_t*)`; `None`: drops not counted.
    pub dropped: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, u32, *mut usize) -> c_int>,
}

/// The CUPTI entry points used (all `CUptiResult` = int).
#[derive(Clone, Copy)]
pub struct Api {
    pub get_version: unsafe extern "C" fn(*mut u32) -> c_int,
    pub register_callbacks: unsafe extern "C" fn(RequestFn, CompleteFn) -> c_int,
    /// CUDA 11.4+; `None` in older ones (then the calibration is used).
    pub register_timestamp: Option<unsafe extern "C" fn(TimestampFn) -> c_int>,
    pub enable: unsafe extern "C" fn(u32) -> c_int,
    pub disable: unsafe extern "C" fn(u32) -> c_int,
    pub flush_all: unsafe extern "C" fn(u32) -> c_int,
    /// CUDA 11.8+: CUPTI's worker flushes every N ms; `None`: our flushes only.
    pub flush_period: Option<unsafe extern "C" fn(u32) -> c_int>,
    pub next_record: unsafe extern "C" fn(*mut u8, usize, *mut *mut u8) -> c_int,
    pub dropped: unsafe extern "C" fn(*mut c_void, u32, *mut usize) -> c_int,
    pub get_timestamp: unsafe extern "C" fn(*mut u64) -> c_int,
    /// The callback API (`cuptiSubscribe`, `cuptiEnableCallback`): how calls learn their
    /// correlation ids. `None`: GPU work stays unlinked.
    pub subscribe: Option<unsafe extern "C" fn(*mut *mut c_void, CallbackFn, *mut c_void) -> c_int>,
    pub enable_callback: Option<unsafe extern "C" fn(u32, *mut c_void, u32, u32) -> c_int>,
    pub unsubscribe: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    /// The multi-subscriber API, when this CUPTI exports all of it (13.2's beta does in part).
    pub v2: Option<V2Api>,
}

/// Why no CUPTI could be had: the state to report and its code.
pub type Unavailable = (GpuTimelineState, u64);

/// A path assembled on the stack: at most 4 KiB, NUL-terminated.
struct PathBuf {
    bytes: [u8; 4096],
    len: usize,
}

impl PathBuf {
    fn new() -> PathBuf {
        PathBuf { bytes: [0; 4096], len: 0 }
    }

    fn push(&mut self, part: &[u8]) -> &mut PathBuf {
        // The last byte stays for the NUL.
        let room = self.bytes.len() - 1;
        self.len += crate::sys::copy_prefix(self.bytes.get_mut(self.len..room).unwrap_or_default(), part);
        self
    }

    fn c_str(&mut self) -> &CStr {
        if let Some(end) = self.bytes.get_mut(self.len) {
            *end = 0;
        }
        CStr::from_bytes_until_nul(&self.bytes).unwrap_or(c"")
    }
}

fn open(path: &CStr, flags: c_int) -> *mut c_void {
    // Safety: dlopen with a NUL-terminated path. The caller holds the guard: our own dlopen
    // hook passes it straight through, unrecorded.
    unsafe { libc::dlopen(path.as_ptr(), flags) }
}

/// The CUDA runtime in use: the directory its library was loaded from and its major version
/// (from the file name `libcudart.so.<major>`), or the driver's version when no runtime is
/// loaded (a program on the driver API alone).
fn cuda_in_use(dir: &mut PathBuf) -> u32 {
    static ANY_RUNTIME_SYMBOL: Real = Real::in_libraries(c"cudaRuntimeGetVersion", CUDA_RUNTIME);
    if let Some(addr) = ANY_RUNTIME_SYMBOL.get() {
        // Safety: dladdr only reads the loader's tables; `info` is a valid out pointer.
        let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
        // Safety: as above.
        if unsafe { libc::dladdr(addr as *const c_void, &mut info) } != 0 && !info.dli_fname.is_null() {
            // Safety: dladdr's file name is NUL-terminated and lives as long as the library.
            let file = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes();
            let slash = file.iter().rposition(|&b| b == b'/').map_or(0, |at| at + 1);
            dir.push(file.get(..slash).unwrap_or_default());
            let name = file.get(slash..).unwrap_or_default();
            let major = name.strip_prefix(b"libcudart.so.").map_or(0, parse_major);
            if major != 0 {
                return major;
            }
        }
    }
    static DRIVER_VERSION: Real = Real::in_libraries(c"cuDriverGetVersion", CUDA_DRIVER);
    let Some(addr) = DRIVER_VERSION.get() else { return 0 };
    // Safety: cuDriverGetVersion(int*) -> CUresult.
    let get: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { as_fn(addr) };
    let mut version = 0;
    // Safety: a valid out pointer.
    if unsafe { get(&mut version) } == 0 { version as u32 / 1000 } else { 0 }
}

fn parse_major(text: &[u8]) -> u32 {
    text.iter()
        .take_while(|b| b.is_ascii_digit())
        .fold(0u32, |n, d| n.saturating_mul(10).saturating_add((d - b'0') as u32))
}

/// The major CUDA version a CUPTI API version stands for: 130202 → 13 (CUPTI 13 numbers its
/// API by release); smaller numbers are the older counter (≤ 12).
pub fn cupti_major(api_version: u32) -> u32 {
    if api_version >= 100_000 { api_version / 10_000 } else { 12 }
}

/// Loads the libcupti to use and its entry points (see the module), or why there is none.
pub fn load(configured: Option<&[u8]>) -> Result<(Api, u32), Unavailable> {
    let mut runtime_dir = PathBuf::new();
    let major = cuda_in_use(&mut runtime_dir);
    let handle = match configured {
        Some(path) => open(PathBuf::new().push(path).c_str(), libc::RTLD_NOW | libc::RTLD_LOCAL),
        None => find(major, &mut runtime_dir),
    };
    if handle.is_null() {
        return Err((GpuTimelineState::NotFound, major as u64));
    }
    let api = resolve(handle).ok_or((GpuTimelineState::NotFound, major as u64))?;
    let mut version = 0;
    // Safety: a valid out pointer.
    if unsafe { (api.get_version)(&mut version) } != 0 || (major != 0 && cupti_major(version) != major) {
        return Err((GpuTimelineState::VersionMismatch, version as u64));
    }
    Ok((api, version))
}

fn find(major: u32, runtime_dir: &mut PathBuf) -> *mut c_void {
    let mut digits = [0u8; 10];
    let major = crate::config::format_u32(major, &mut digits);
    let mut soname = PathBuf::new();
    let loaded = open(soname.push(b"libcupti.so.").push(major).c_str(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
    let name = soname.bytes.get(..soname.len).unwrap_or_default();
    if !loaded.is_null() {
        return loaded;
    }
    let dir_len = runtime_dir.len;
    // The CUDA 13 wheel keeps CUPTI beside the runtime; the CUDA 12 wheels in a sibling package.
    for beside in [&b""[..], b"../../cuda_cupti/lib/"] {
        if dir_len == 0 {
            break;
        }
        runtime_dir.len = dir_len;
        let handle = open(runtime_dir.push(beside).push(name).c_str(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if !handle.is_null() {
            return handle;
        }
    }
    // A toolkit: the one named, the loader's own search (LD_LIBRARY_PATH, ld.so.cache), the
    // default install (a program built by nvcc carries a static runtime: nothing to be beside).
    let home = crate::config::getenv(c"CUDA_HOME").or_else(|| crate::config::getenv(c"CUDA_PATH"));
    let handle = home.map_or(core::ptr::null_mut(), |home| in_toolkit(home, name));
    if !handle.is_null() {
        return handle;
    }
    let handle = open(PathBuf::new().push(name).c_str(), libc::RTLD_NOW | libc::RTLD_LOCAL);
    if !handle.is_null() {
        return handle;
    }
    in_toolkit(b"/usr/local/cuda", name)
}

/// `name` in the CUDA toolkit at `home` (null: not there): its CUPTI folder, else its library
/// folders (conda and the CUDA 13 wheel keep CUPTI beside the other libraries).
fn in_toolkit(home: &[u8], name: &[u8]) -> *mut c_void {
    for folder in [&b"/extras/CUPTI/lib64/"[..], b"/lib64/", b"/lib/"] {
        let mut path = PathBuf::new();
        let handle = open(path.push(home).push(folder).push(name).c_str(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if !handle.is_null() {
            return handle;
        }
    }
    core::ptr::null_mut()
}

fn symbol(handle: *mut c_void, name: &CStr) -> usize {
    // Safety: a live handle from dlopen and a NUL-terminated name.
    unsafe { glibc_dlsym(handle, name.as_ptr() as *const c_char) as usize }
}

fn resolve(handle: *mut c_void) -> Option<Api> {
    let required = |name: &CStr| match symbol(handle, name) {
        0 => None,
        addr => Some(addr),
    };
    // Safety: each address is CUPTI's definition of that very entry point, whose C prototype
    // (cupti_activity.h, cupti_version.h) is the type it is read as.
    unsafe {
        Some(Api {
            get_version: as_fn(required(c"cuptiGetVersion")?),
            register_callbacks: as_fn(required(c"cuptiActivityRegisterCallbacks")?),
            register_timestamp: required(c"cuptiActivityRegisterTimestampCallback").map(|a| as_fn(a)),
            enable: as_fn(required(c"cuptiActivityEnable")?),
            disable: as_fn(required(c"cuptiActivityDisable")?),
            flush_all: as_fn(required(c"cuptiActivityFlushAll")?),
            flush_period: required(c"cuptiActivityFlushPeriod").map(|a| as_fn(a)),
            next_record: as_fn(required(c"cuptiActivityGetNextRecord")?),
            dropped: as_fn(required(c"cuptiActivityGetNumDroppedRecords")?),
            get_timestamp: as_fn(required(c"cuptiGetTimestamp")?),
            subscribe: required(c"cuptiSubscribe").map(|a| as_fn(a)),
            enable_callback: required(c"cuptiEnableCallback").map(|a| as_fn(a)),
            unsubscribe: required(c"cuptiUnsubscribe").map(|a| as_fn(a)),
            v2: resolve_v2(handle),
        })
    }
}

fn resolve_v2(handle: *mut c_void) -> Option<V2Api> {
    let required = |name: &CStr| match symbol(handle, name) {
        0 => None,
        addr => Some(addr),
    };
    // Unsubscribing is how the path ends: no `_v2` path without it.
    required(c"cuptiUnsubscribe")?;
    // Safety: as in `resolve`, each address is CUPTI's definition of the entry point named,
    // whose C prototype (cupti_activity.h, cupti_callbacks.h of CUPTI 13.3) is the type it is
    // read as.
    unsafe {
        Some(V2Api {
            subscribe: as_fn(required(c"cuptiSubscribe_v2")?),
            register_callbacks: as_fn(required(c"cuptiActivityRegisterCallbacks_v2")?),
            enable: as_fn(required(c"cuptiActivityEnable_v2")?),
            disable: as_fn(required(c"cuptiActivityDisable_v2")?),
            next_record: as_fn(required(c"cuptiActivityGetNextRecord_v2")?),
            get_timestamp: as_fn(required(c"cuptiGetTimestamp_v2")?),
            dropped: required(c"cuptiActivityGetNumDroppedRecords_v2").map(|a| as_fn(a)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cupti_versions_name_their_cuda_major() {
        // CUPTI 13.2's header says CUPTI_API_VERSION 130202; CUDA 12's CUPTI counted 18…24.
        assert_eq!(cupti_major(130_202), 13);
        assert_eq!(cupti_major(24), 12);
        assert_eq!(parse_major(b"13"), 13);
        assert_eq!(parse_major(b"12.8"), 12);
        assert_eq!(parse_major(b""), 0);
    }

    #[test]
    fn a_tools_subscriber_params_say_whether_it_shares_cupti() {
        let mut params = SubscriberParams {
            struct_size: SUBSCRIBER_PARAMS_SIZE,
            name: core::ptr::null(),
            old_name: core::ptr::null_mut(),
            old_name_size: 0,
            allow_multiple: 1,
        };
        assert_eq!(SUBSCRIBER_PARAMS_SIZE, 33);
        let at = |p: &SubscriberParams| p as *const SubscriberParams as *const u8;
        // Safety: a whole struct of the size it states.
        assert!(unsafe { allows_multiple(at(&params)) });
        params.allow_multiple = 0;
        // Safety: as above.
        assert!(!unsafe { allows_multiple(at(&params)) });
        // A size that stops before the field (an older header's struct): not asked for.
        params.allow_multiple = 1;
        params.struct_size = 32;
        // Safety: as above.
        assert!(!unsafe { allows_multiple(at(&params)) });
        // Safety: null is allowed.
        assert!(!unsafe { allows_multiple(core::ptr::null()) });
    }

    #[test]
    fn paths_are_cut_at_their_buffer_not_overrun() {
        let mut path = PathBuf::new();
        path.push(&[b'a'; 5000]);
        assert_eq!(path.c_str().to_bytes().len(), 4095);
        let mut path = PathBuf::new();
        assert_eq!(path.push(b"/x/").push(b"libcupti.so.13").c_str(), c"/x/libcupti.so.13");
    }
}

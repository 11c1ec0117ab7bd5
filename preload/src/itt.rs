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

use core::ffi::{CStr, c_char, c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

use mlprof_format::func::Func;
use mlprof_format::record::IttSpan;

use crate::lane;
use crate::session;

/// `__itt_domain` (ittnotify.h; every field naturally aligned, as `#pragma pack(8)` leaves it).
#[repr(C)]
pub struct IttDomain {
    pub flags: c_int,
    pub name_a: *const c_char,
    pub name_w: *const c_void,
    pub extra1: c_int,
    /// Ours: the chained collector's domain for this one.
    pub extra2: AtomicPtr<c_void>,
    pub next: *mut IttDomain,
}

/// `__itt_string_handle`.
#[repr(C)]
pub struct IttStringHandle {
    pub str_a: *const c_char,
    pub str_w: *const c_void,
    pub extra1: c_int,
    /// Ours: the chained collector's handle for this one.
    pub extra2: AtomicPtr<c_void>,
    pub next: *mut IttStringHandle,
}

/// `__itt_id`, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IttId {
    pub d1: u64,
    pub d2: u64,
    pub d3: u64,
}

/// Marks objects this collector allocated (in `extra1`), which carry their string id.
const OURS: c_int = 0x6d6c_7066;

/// A string handle we allocated: the ITT object first, then what we cache for it.
#[repr(C)]
struct OurHandle {
    itt: IttStringHandle,
    id: u64,
    len: usize,
}

/// A domain we allocated.
#[repr(C)]
struct OurDomain {
    itt: IttDomain,
    id: u64,
    len: usize,
    /// mlprof's own stamping domain: forwarded, never recorded (we recorded the call itself).
    own: bool,
}

const INTERN_SLOTS: usize = 1 << 16;

/// Lock-free intern tables: content hash → leaked object. PyTorch creates a string handle per
/// op call (`itt_range_push`), so lookups must be cheap and never take a lock.
static HANDLES: [AtomicPtr<OurHandle>; INTERN_SLOTS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; INTERN_SLOTS];
static DOMAINS: [AtomicPtr<OurDomain>; 256] = [const { AtomicPtr::new(core::ptr::null_mut()) }; 256];

fn leak_c_string(bytes: &[u8]) -> *const c_char {
    let mut owned = Vec::with_capacity(bytes.len() + 1);
    owned.extend_from_slice(bytes);
    owned.push(0);
    owned.leak().as_ptr() as *const c_char
}

fn name_bytes<'a>(name: *const c_char) -> &'a [u8] {
    if name.is_null() {
        return b"";
    }
    // Safety: ITT names are NUL-terminated strings that live as long as their objects.
    unsafe { CStr::from_ptr(name) }.to_bytes()
}

/// The string handle for `name`, created once per distinct name.
pub fn string_handle(name: *const c_char) -> *mut IttStringHandle {
    let bytes = name_bytes(name);
    let id = mlprof_format::string_id(bytes);
    let start = id as usize % INTERN_SLOTS;
    for probe in 0..64 {
        let slot = &HANDLES[(start + probe) % INTERN_SLOTS];
        let mut current = slot.load(Ordering::Acquire);
        if current.is_null() {
            let fresh = Box::into_raw(Box::new(OurHandle {
                itt: IttStringHandle {
                    str_a: leak_c_string(bytes),
                    str_w: core::ptr::null(),
                    extra1: OURS,
                    extra2: AtomicPtr::new(core::ptr::null_mut()),
                    next: core::ptr::null_mut(),
                },
                id,
                len: bytes.len(),
            }));
            match slot.compare_exchange(core::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return fresh as *mut IttStringHandle,
                Err(winner) => {
                    // Another thread filled the slot first; ours was never shared.
                    // Safety: `fresh` came from Box::into_raw above and nobody else saw it.
                    drop(unsafe { Box::from_raw(fresh) });
                    current = winner;
                }
            }
        }
        // Safety: slots only ever hold leaked, never-freed handles.
        let handle = unsafe { &*current };
        if handle.id == id && handle.len == bytes.len() && name_bytes(handle.itt.str_a) == bytes {
            return current as *mut IttStringHandle;
        }
    }
    // A crowded neighbourhood: a fresh, uninterned handle is still correct.
    Box::into_raw(Box::new(OurHandle {
        itt: IttStringHandle {
            str_a: leak_c_string(bytes),
            str_w: core::ptr::null(),
            extra1: OURS,
            extra2: AtomicPtr::new(core::ptr::null_mut()),
            next: core::ptr::null_mut(),
        },
        id,
        len: bytes.len(),
    })) as *mut IttStringHandle
}

/// The domain named `name`, created once.
pub fn domain(name: *const c_char) -> *mut IttDomain {
    let bytes = name_bytes(name);
    let id = mlprof_format::string_id(bytes);
    for slot in &DOMAINS {
        let mut current = slot.load(Ordering::Acquire);
        if current.is_null() {
            let fresh = Box::into_raw(Box::new(OurDomain {
                itt: IttDomain {
                    flags: 1,
                    name_a: leak_c_string(bytes),
                    name_w: core::ptr::null(),
                    extra1: OURS,
                    extra2: AtomicPtr::new(core::ptr::null_mut()),
                    next: core::ptr::null_mut(),
                },
                id,
                len: bytes.len(),
                own: bytes == crate::itt_stamp::DOMAIN.to_bytes(),
            }));
            match slot.compare_exchange(core::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return fresh as *mut IttDomain,
                Err(winner) => {
                    // Safety: as in `string_handle`.
                    drop(unsafe { Box::from_raw(fresh) });
                    current = winner;
                }
            }
        }
        // Safety: slots only ever hold leaked, never-freed domains.
        let domain = unsafe { &*current };
        if domain.id == id && name_bytes(domain.itt.name_a) == bytes {
            return current as *mut IttDomain;
        }
    }
    core::ptr::null_mut()
}

/// (string id, name bytes, is it our own stamping domain) of any domain pointer.
fn domain_identity<'a>(domain: *const IttDomain) -> (u64, &'a [u8], bool) {
    // Safety: ITT callers pass domains created by a domain_create (ours or a static part's).
    let Some(d) = (unsafe { domain.as_ref() }) else { return (0, b"", false) };
    if d.extra1 == OURS {
        // Safety: extra1 == OURS marks an OurDomain we allocated.
        let ours = unsafe { &*(domain as *const OurDomain) };
        return (ours.id, name_bytes(d.name_a), ours.own);
    }
    // A domain the static part created before it loaded us: ours is recognised by its name.
    let bytes = name_bytes(d.name_a);
    (mlprof_format::string_id(bytes), bytes, bytes == crate::itt_stamp::DOMAIN.to_bytes())
}

fn handle_identity<'a>(handle: *const IttStringHandle) -> (u64, &'a [u8]) {
    // Safety: as in `domain_identity`.
    let Some(h) = (unsafe { handle.as_ref() }) else { return (0, b"") };
    if h.extra1 == OURS {
        // Safety: extra1 == OURS marks an OurHandle we allocated.
        let ours = unsafe { &*(handle as *const OurHandle) };
        return (ours.id, name_bytes(h.str_a));
    }
    let bytes = name_bytes(h.str_a);
    (mlprof_format::string_id(bytes), bytes)
}

// ---- per-thread task stacks ----------------------------------------------------------------

const MAX_DEPTH: usize = 32;

#[derive(Clone, Copy, Default)]
struct OpenTask {
    start: u64,
    name: u64,
    domain: u64,
    id: u64,
    parent: u64,
    record: bool,
}

struct TaskStack {
    depth: core::cell::Cell<usize>,
    tasks: [core::cell::Cell<OpenTask>; MAX_DEPTH],
    frame: core::cell::Cell<OpenTask>,
}

thread_local! {
    static STACK: TaskStack = const {
        TaskStack {
            depth: core::cell::Cell::new(0),
            tasks: [const { core::cell::Cell::new(OpenTask { start: 0, name: 0, domain: 0, id: 0, parent: 0, record: false }) }; MAX_DEPTH],
            frame: core::cell::Cell::new(OpenTask { start: 0, name: 0, domain: 0, id: 0, parent: 0, record: false }),
        }
    };
}

/// Sends the names a span refers to (once per process) and writes the span.
fn write_span(func: Func, task: OpenTask, end: u64, depth: usize, names: &[(u64, &[u8])]) {
    session::with_lane(|ring, lane, pid, thread| {
        for &(id, bytes) in names {
            if id != 0 && !lane::send_string(ring, lane, pid, thread.tid.get(), id, bytes) {
                ring.count_drop(lane);
                return;
            }
        }
        let span = IttSpan {
            kind: func as u16,
            pid,
            tid: thread.tid.get(),
            depth: depth as i32,
            start: task.start,
            dur: end.saturating_sub(task.start),
            id: task.id,
            name: task.name,
            domain: task.domain,
            parent: task.parent,
            ..IttSpan::default()
        };
        ring.push(lane, &span.into_event());
    });
}

pub fn task_begin(domain: *const IttDomain, id: IttId, parent: IttId, name: *const IttStringHandle) {
    let (domain_id, domain_name, own) = domain_identity(domain);
    let (name_id, name_bytes) = handle_identity(name);
    let task = OpenTask {
        start: crate::clock::now(),
        name: name_id,
        domain: domain_id,
        id: id.d1,
        parent: parent.d1,
        record: !own,
    };
    let _ = STACK.try_with(|stack| {
        let depth = stack.depth.get();
        if let Some(slot) = stack.tasks.get(depth) {
            slot.set(task);
            if task.record {
                // Names are sent at begin: the span is written at end, when they may be gone.
                write_names(&[(domain_id, domain_name), (name_id, name_bytes)]);
            }
        }
        stack.depth.set(depth + 1);
    });
}

pub fn task_end() {
    let end = crate::clock::now();
    let _ = STACK.try_with(|stack| {
        let depth = stack.depth.get();
        if depth == 0 {
            return;
        }
        stack.depth.set(depth - 1);
        if let Some(task) = stack.tasks.get(depth - 1).map(|slot| slot.get())
            && task.record
        {
            write_span(Func::IttTask, task, end, depth - 1, &[]);
        }
    });
}

pub fn frame_begin(domain: *const IttDomain, id: *const IttId) {
    let (domain_id, domain_name, own) = domain_identity(domain);
    // Safety: a frame id pointer is either null or points to the caller's id.
    let id = unsafe { id.as_ref() }.map_or(0, |id| id.d1);
    let task =
        OpenTask { start: crate::clock::now(), name: 0, domain: domain_id, id, parent: 0, record: !own };
    let _ = STACK.try_with(|stack| stack.frame.set(task));
    if !own {
        write_names(&[(domain_id, domain_name)]);
    }
}

pub fn frame_end() {
    let end = crate::clock::now();
    let _ = STACK.try_with(|stack| {
        let task = stack.frame.replace(OpenTask::default());
        if task.record && task.start != 0 {
            write_span(Func::IttFrame, task, end, 0, &[]);
        }
    });
}

/// A marker, pause or resume: an instant (`id`: the marker's `__itt_id.d1`).
pub fn instant(func: Func, domain: *const IttDomain, name: *const IttStringHandle, id: u64) {
    let (domain_id, domain_name, own) = domain_identity(domain);
    if own {
        return;
    }
    let (name_id, name_bytes) = handle_identity(name);
    let now = crate::clock::now();
    let task = OpenTask { start: now, name: name_id, domain: domain_id, id, ..OpenTask::default() };
    write_span(func, task, now, 0, &[(domain_id, domain_name), (name_id, name_bytes)]);
}

fn write_names(names: &[(u64, &[u8])]) {
    session::with_lane(|ring, lane, pid, thread| {
        for &(id, bytes) in names {
            if id != 0 {
                lane::send_string(ring, lane, pid, thread.tid.get(), id, bytes);
            }
        }
    });
}

// ---- chaining to another collector ---------------------------------------------------------

/// The chained collector's functions, filled by its `__itt_api_init` through our shadow table.
pub struct Chain {
    pub domain_create: AtomicUsize,
    pub string_handle_create: AtomicUsize,
    pub task_begin: AtomicUsize,
    pub task_end: AtomicUsize,
    pub frame_begin_v3: AtomicUsize,
    pub frame_end_v3: AtomicUsize,
    pub marker: AtomicUsize,
    pub pause: AtomicUsize,
    pub resume: AtomicUsize,
    pub thread_set_name: AtomicUsize,
}

pub static CHAIN: Chain = Chain {
    domain_create: AtomicUsize::new(0),
    string_handle_create: AtomicUsize::new(0),
    task_begin: AtomicUsize::new(0),
    task_end: AtomicUsize::new(0),
    frame_begin_v3: AtomicUsize::new(0),
    frame_end_v3: AtomicUsize::new(0),
    marker: AtomicUsize::new(0),
    pause: AtomicUsize::new(0),
    resume: AtomicUsize::new(0),
    thread_set_name: AtomicUsize::new(0),
};

static CHAIN_LOADED: AtomicBool = AtomicBool::new(false);

/// Whether a chained collector is active.
pub fn chained() -> bool {
    CHAIN.task_begin.load(Ordering::Relaxed) != 0 && !CHAIN_STOPPED.load(Ordering::Relaxed)
}

/// Set when the process starts exiting: a chained collector tears itself down in its own
/// atexit handler (Intel's reference collector closes its log and frees its objects there), so
/// nothing may be forwarded to it, nor stamped, from then on.
static CHAIN_STOPPED: AtomicBool = AtomicBool::new(false);

extern "C" fn stop_chain() {
    CHAIN_STOPPED.store(true, Ordering::Release);
    crate::itt_stamp::stop();
}

/// Runs `f` (a call into the chained collector) with this thread's guard held as internal.
pub fn as_internal<R>(f: impl FnOnce() -> R) -> R {
    let mut f = Some(f);
    let mut result = None;
    let _ = crate::guard::THREAD
        .try_with(|state| result = Some(state.internal(|| (f.take().unwrap_or_else(|| unreachable!()))())));
    match (result, f) {
        (Some(result), _) => result,
        (None, Some(f)) => f(),
        (None, None) => unreachable!(),
    }
}

/// The chained collector's domain for `domain` (created on first use).
pub fn chained_domain(domain: *const IttDomain) -> *mut c_void {
    // Safety: as in `domain_identity`.
    match unsafe { domain.as_ref() } {
        Some(d) => chained_object(&d.extra2, d.name_a, &CHAIN.domain_create),
        None => core::ptr::null_mut(),
    }
}

/// The chained collector's string handle for `handle` (created on first use).
pub fn chained_handle(handle: *const IttStringHandle) -> *mut c_void {
    // Safety: as in `domain_identity`.
    match unsafe { handle.as_ref() } {
        Some(h) => chained_object(&h.extra2, h.str_a, &CHAIN.string_handle_create),
        None => core::ptr::null_mut(),
    }
}

/// The chained collector's object for one of ours, kept in our object's `extra2`: made once by
/// the chained collector's `create(name)` (`__itt_domain_create` or
/// `__itt_string_handle_create`, same prototype).
fn chained_object(slot: &AtomicPtr<c_void>, name: *const c_char, create: &AtomicUsize) -> *mut c_void {
    let known = slot.load(Ordering::Acquire);
    if !known.is_null() {
        return known;
    }
    let create = create.load(Ordering::Relaxed);
    if create == 0 {
        return core::ptr::null_mut();
    }
    // Safety: the chained collector's create function, `(const char*) -> object*`.
    let theirs =
        unsafe { crate::real::as_fn::<unsafe extern "C" fn(*const c_char) -> *mut c_void>(create)(name) };
    slot.store(theirs, Ordering::Release);
    theirs
}

/// `__itt_api_info`.
#[repr(C)]
pub struct ApiInfo {
    pub name: *const c_char,
    pub func_ptr: *mut *mut c_void,
    pub init_func: *mut c_void,
    pub null_func: *mut c_void,
    pub group: c_int,
}

/// The head of `__itt_global` up to the fields a collector uses.
#[repr(C)]
pub struct IttGlobal {
    pub magic: [u8; 8],
    pub version_major: core::ffi::c_ulong,
    pub version_minor: core::ffi::c_ulong,
    pub version_build: core::ffi::c_ulong,
    pub api_initialized: core::ffi::c_long,
    pub mutex_initialized: core::ffi::c_long,
    pub atomic_counter: core::ffi::c_long,
    pub mutex: libc::pthread_mutex_t,
    pub lib: *mut c_void,
    pub error_handler: *mut c_void,
    pub dll_path_ptr: *mut *const c_char,
    pub api_list_ptr: *mut ApiInfo,
    pub next: *mut IttGlobal,
    /// thread, domain and string lists, state, counters…: zero in our shadow copy.
    pub rest: [usize; 8],
}

/// Loads the collector named by `MLPROF_ITT_CHAIN` (once) and lets it fill our shadow table.
pub fn load_chain(template: *const IttGlobal, groups: c_int) {
    if CHAIN_LOADED.swap(true, Ordering::AcqRel) {
        return;
    }
    // Safety: getenv without allocation; the value is only read here.
    let path = unsafe { libc::getenv(c"MLPROF_ITT_CHAIN".as_ptr()) };
    if path.is_null() || name_bytes(path).is_empty() {
        return;
    }
    // Safety: dlopen/dlsym of the library the user named; errors leave the chain empty.
    let lib = unsafe { libc::dlopen(path, libc::RTLD_LAZY) };
    if lib.is_null() {
        crate::sys::log_line(&[b"mlprof: cannot load the chained ITT collector ", name_bytes(path)]);
        return;
    }
    let init = crate::exports::glibc_dlsym(lib, c"__itt_api_init".as_ptr());
    if init.is_null() {
        crate::sys::log_line(&[
            b"mlprof: the chained ITT collector has no __itt_api_init: ",
            name_bytes(path),
        ]);
        return;
    }
    let slots: [(&CStr, &AtomicUsize); 10] = [
        (c"__itt_domain_create", &CHAIN.domain_create),
        (c"__itt_string_handle_create", &CHAIN.string_handle_create),
        (c"__itt_task_begin", &CHAIN.task_begin),
        (c"__itt_task_end", &CHAIN.task_end),
        (c"__itt_frame_begin_v3", &CHAIN.frame_begin_v3),
        (c"__itt_frame_end_v3", &CHAIN.frame_end_v3),
        (c"__itt_marker", &CHAIN.marker),
        (c"__itt_pause", &CHAIN.pause),
        (c"__itt_resume", &CHAIN.resume),
        (c"__itt_thread_set_name", &CHAIN.thread_set_name),
    ];
    let mut list: Vec<ApiInfo> = slots
        .iter()
        .map(|(name, slot)| ApiInfo {
            name: name.as_ptr(),
            func_ptr: slot.as_ptr() as *mut *mut c_void,
            init_func: core::ptr::null_mut(),
            null_func: core::ptr::null_mut(),
            group: 0,
        })
        .collect();
    list.push(ApiInfo {
        name: core::ptr::null(),
        func_ptr: core::ptr::null_mut(),
        init_func: core::ptr::null_mut(),
        null_func: core::ptr::null_mut(),
        group: 0,
    });
    // The shadow global: the application's, with our table and the chained library's handle,
    // and an unlocked, uninitialized mutex (the caller holds the original locked).
    // Safety: `template` is the __itt_global the static part handed us; only its identifying
    // head (magic, version) is read. An all-zero pthread mutex is a valid unlocked mutex.
    let mut shadow: IttGlobal = unsafe { core::mem::zeroed() };
    // Safety: see above; a null template is handled by `as_ref`.
    if let Some(template) = unsafe { template.as_ref() } {
        shadow.magic = template.magic;
        shadow.version_major = template.version_major;
        shadow.version_minor = template.version_minor;
        shadow.version_build = template.version_build;
    }
    shadow.api_initialized = 1;
    shadow.lib = lib;
    shadow.api_list_ptr = list.leak().as_mut_ptr();
    let shadow = Box::leak(Box::new(shadow));
    // Safety: the chained collector's __itt_api_init(__itt_global*, __itt_group_id).
    unsafe {
        crate::real::as_fn::<unsafe extern "C" fn(*mut IttGlobal, c_int)>(init as usize)(shadow, groups)
    };
    // Registered after the chained collector's own atexit handlers, so it runs before them.
    // Safety: registering a plain extern "C" function.
    unsafe { libc::atexit(stop_chain) };
}

//! ITT task begin and end and markers as CPython builtins, for the `--torch` hook's phase and
//! data spans and `--torch-shapes`' markers (python/mlprof_torch/itt.py).
//!
//! Through ctypes, a call costs ~5 µs inside a training step (libffi's call set-up and argument
//! conversion, cold between steps: BENCHMARKS.md, "Second GPU session"); a builtin taking its
//! arguments as a vector (`METH_FASTCALL`) is called by the interpreter directly. libmlprof.so
//! does not link libpython (it is loaded into every process): the hook hands over, once, the
//! addresses of `PyLong_AsUnsignedLongLongMask`, `PyErr_Occurred`, `Py_IncRef` and `None`
//! ([`mlprof_py_setup`]), and makes the builtins itself with `PyCFunction_NewEx` over the three
//! functions below. Not hooks: called only by that Python code, with the GIL held. An argument
//! that is not an integer raises the interpreter's TypeError (the builtin returns NULL with the
//! error set) and reaches no ITT entry point: its all-ones error value is no address.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicPtr, Ordering};

use super::itt::{__itt_marker, __itt_task_begin, __itt_task_end};
use crate::itt::{IttDomain, IttId, IttStringHandle};

/// `unsigned long long PyLong_AsUnsignedLongLongMask(PyObject *)` (CPython's stable ABI).
type AsU64 = unsafe extern "C" fn(*mut c_void) -> u64;
/// `void Py_IncRef(PyObject *)` (stable ABI).
type IncRef = unsafe extern "C" fn(*mut c_void);
/// `PyObject *PyErr_Occurred(void)` (stable ABI).
type ErrOccurred = unsafe extern "C" fn() -> *mut c_void;

static AS_U64: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static ERR_OCCURRED: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static INC_REF: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static NONE: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// Takes the interpreter's functions and `None`; 1 when all four are there (then the builtins
/// may be made), 0 otherwise.
#[unsafe(no_mangle)]
pub extern "C" fn mlprof_py_setup(
    as_u64: *mut c_void,
    err_occurred: *mut c_void,
    inc_ref: *mut c_void,
    none: *mut c_void,
) -> c_int {
    if as_u64.is_null() || err_occurred.is_null() || inc_ref.is_null() || none.is_null() {
        return 0;
    }
    AS_U64.store(as_u64, Ordering::Release);
    ERR_OCCURRED.store(err_occurred, Ordering::Release);
    INC_REF.store(inc_ref, Ordering::Release);
    NONE.store(none, Ordering::Release);
    1
}

/// `None`, with the reference a builtin's result owns.
///
/// # Safety
/// After a successful [`mlprof_py_setup`], with the GIL held.
unsafe fn new_none() -> *mut c_void {
    let none = NONE.load(Ordering::Acquire);
    // Safety: INC_REF was set with NONE by `mlprof_py_setup` to the interpreter's Py_IncRef.
    unsafe { core::mem::transmute::<*mut c_void, IncRef>(INC_REF.load(Ordering::Acquire))(none) };
    none
}

/// A builtin's body: its `nargs` arguments as unsigned 64-bit integers (masked, as ctypes
/// converts) to `call`, then `None`. Not `N` of them: nothing is called. One that is not an
/// integer: nothing is called and NULL is returned, the interpreter raising its TypeError.
///
/// # Safety
/// `args` holds `nargs` object pointers (the interpreter's vectorcall convention), GIL held,
/// after a successful [`mlprof_py_setup`].
unsafe fn builtin<const N: usize>(
    args: *const *mut c_void,
    nargs: isize,
    call: impl FnOnce([u64; N]),
) -> *mut c_void {
    if nargs == N as isize && !args.is_null() {
        // Safety: set by `mlprof_py_setup` to the interpreter's PyLong_AsUnsignedLongLongMask
        // and PyErr_Occurred.
        let (as_u64, err_occurred) = unsafe {
            (
                core::mem::transmute::<*mut c_void, AsU64>(AS_U64.load(Ordering::Acquire)),
                core::mem::transmute::<*mut c_void, ErrOccurred>(ERR_OCCURRED.load(Ordering::Acquire)),
            )
        };
        let mut values = [0u64; N];
        for (i, value) in values.iter_mut().enumerate() {
            // Safety: i < nargs == N; each is a live object.
            *value = unsafe { as_u64(*args.add(i)) };
            // All ones is also the error value: then ask whether it was one, before any other
            // call into the interpreter.
            // Safety: GIL held.
            if *value == u64::MAX && !unsafe { err_occurred() }.is_null() {
                return core::ptr::null_mut();
            }
        }
        call(values);
    }
    // Safety: after a successful setup, GIL held.
    unsafe { new_none() }
}

/// An ITT id from its first word, as ctypes' `IttId(value, 0, 0)`.
fn id(d1: u64) -> IttId {
    IttId { d1, ..IttId::default() }
}

/// `task_begin(domain, id, parent, handle)`: `__itt_task_begin`, its arguments in its own
/// order, ids as their first word; domain and handle are the addresses `__itt_domain_create`
/// and `__itt_string_handle_create` returned (0: none).
///
/// # Safety
/// Called by the interpreter as a `METH_FASTCALL` builtin made after [`mlprof_py_setup`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlprof_py_task_begin(
    _module: *mut c_void,
    args: *const *mut c_void,
    nargs: isize,
) -> *mut c_void {
    // Safety: the interpreter's vectorcall arguments, GIL held, made after setup. The
    // addresses are objects our create functions returned (or 0, which `__itt_task_begin`
    // takes as no domain / no name), as the ctypes path passes them.
    unsafe {
        builtin(args, nargs, |[domain, task, parent, handle]| {
            __itt_task_begin(domain as *const IttDomain, id(task), id(parent), handle as *mut IttStringHandle)
        })
    }
}

/// `task_end(domain)`: `__itt_task_end`.
///
/// # Safety
/// As [`mlprof_py_task_begin`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlprof_py_task_end(
    _module: *mut c_void,
    args: *const *mut c_void,
    nargs: isize,
) -> *mut c_void {
    // Safety: as in `mlprof_py_task_begin`.
    unsafe { builtin(args, nargs, |[domain]| __itt_task_end(domain as *const IttDomain)) }
}

/// `marker(domain, id, handle, scope)`: `__itt_marker`.
///
/// # Safety
/// As [`mlprof_py_task_begin`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlprof_py_marker(
    _module: *mut c_void,
    args: *const *mut c_void,
    nargs: isize,
) -> *mut c_void {
    // Safety: as in `mlprof_py_task_begin`; the scope is a plain value.
    unsafe {
        builtin(args, nargs, |[domain, marker, handle, scope]| {
            __itt_marker(
                domain as *const IttDomain,
                id(marker),
                handle as *mut IttStringHandle,
                scope as c_int,
            )
        })
    }
}

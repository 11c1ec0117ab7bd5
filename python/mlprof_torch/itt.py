"""Calls libmlprof.so's ITT collector entry points (it is LD_PRELOADed, so the process's global
symbol scope has them). Tasks nest per thread; `Tracker` keeps Python's own begins and ends
balanced even when a span is ended out of order."""

import ctypes
import os
import sys
import threading


class IttId(ctypes.Structure):
    _fields_ = [("d1", ctypes.c_uint64), ("d2", ctypes.c_uint64), ("d3", ctypes.c_uint64)]


_MASK = 0xFFFFFFFFFFFFFFFF


class Itt:
    """The entry points; `None` from `load()` when libmlprof.so is not loaded.

    `task_begin(domain, id, parent, handle)`, `task_end(domain)` and `marker(domain, id, handle,
    scope)` take plain integers (domain and handle from `domain()` / `handle()`, 0 for none; an
    id is its `__itt_id`'s first word): CPython builtins over libmlprof.so where the interpreter
    allows (`builtins` is True), else ctypes calls that build the `__itt_id`s."""

    def __init__(self, lib):
        get = lambda name: getattr(lib, name)  # noqa: E731 (names with leading underscores)
        self._domain_create = get("__itt_domain_create")
        self._domain_create.restype = ctypes.c_void_p
        self._domain_create.argtypes = [ctypes.c_char_p]
        self._handle_create = get("__itt_string_handle_create")
        self._handle_create.restype = ctypes.c_void_p
        self._handle_create.argtypes = [ctypes.c_char_p]
        self._domains = {}
        self._handles = {}
        fast = _builtins(lib)
        self.builtins = fast is not None
        self.task_begin, self.task_end, self.marker = fast or _through_ctypes(get)

    def domain(self, name):
        d = self._domains.get(name)
        if d is None:
            d = self._domains[name] = self._domain_create(name.encode()) or 0
        return d

    def handle(self, name):
        h = self._handles.get(name)
        if h is None:
            h = self._handles[name] = self._handle_create(name.encode("utf-8", "replace")) or 0
        return h


def _through_ctypes(get):
    """(task_begin, task_end, marker) as `Itt` describes them, through ctypes."""
    begin = get("__itt_task_begin")
    begin.restype = None
    begin.argtypes = [ctypes.c_void_p, IttId, IttId, ctypes.c_void_p]
    end = get("__itt_task_end")
    end.restype = None
    end.argtypes = [ctypes.c_void_p]
    marker = get("__itt_marker")
    marker.restype = None
    marker.argtypes = [ctypes.c_void_p, IttId, ctypes.c_void_p, ctypes.c_int]

    def task_begin(domain, ident, parent, handle):
        begin(domain, IttId(ident & _MASK, 0, 0), IttId(parent & _MASK, 0, 0), handle)

    def task_marker(domain, ident, handle, scope):
        marker(domain, IttId(ident & _MASK, 0, 0), handle, scope)

    return task_begin, end, task_marker


class _MethodDef(ctypes.Structure):
    """CPython's PyMethodDef (stable ABI)."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("meth", ctypes.c_void_p),
        ("flags", ctypes.c_int),
        ("doc", ctypes.c_char_p),
    ]


_METH_FASTCALL = 0x0080
_KEEP = []  # the method definitions live as long as the builtins made from them


def _builtins(lib):
    """libmlprof.so's mlprof_py_task_begin/end and mlprof_py_marker as builtins: a ctypes call
    costs microseconds inside a training step, a builtin's much less
    (preload/src/exports/python.rs). (task_begin, task_end, marker) as `Itt` describes them, or
    None where the library or the interpreter lacks what it takes."""
    try:
        if sys.implementation.name != "cpython" or sys.version_info < (3, 8):
            return None
        if not hasattr(lib, "mlprof_py_setup"):
            return None  # a libmlprof.so older than this hook
        api = ctypes.pythonapi
        address = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
        setup = lib.mlprof_py_setup
        setup.restype = ctypes.c_int
        setup.argtypes = [ctypes.c_void_p] * 4
        functions = (api.PyLong_AsUnsignedLongLongMask, api.PyErr_Occurred, api.Py_IncRef)
        if not setup(*(address(f) for f in functions), id(None)):
            return None
        names = (b"task_begin", b"task_end", b"marker")
        functions = (lib.mlprof_py_task_begin, lib.mlprof_py_task_end, lib.mlprof_py_marker)
        defs = (_MethodDef * 3)(
            *(_MethodDef(n, address(f), _METH_FASTCALL, None) for n, f in zip(names, functions))
        )
        _KEEP.append(defs)
        new = api.PyCFunction_NewEx
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]
        return tuple(new(ctypes.addressof(d), None, None) for d in defs)
    except Exception:
        return None


def load():
    try:
        # PyDLL, not CDLL: the entry points never block (lock-free tables, no system call), so
        # holding the GIL across them is safe, and CDLL's release and re-acquire at every call
        # both costs time and lets another Python thread (the DataLoader's pin-memory thread)
        # take the GIL in the middle of a training step.
        lib = ctypes.PyDLL(None)
        if not hasattr(lib, "__itt_task_begin") or not hasattr(lib, "__itt_api_init"):
            return None
        return Itt(lib)
    except Exception:
        return None


class Tracker:
    """Per-thread stack of the tasks this module began, mirrored in libmlprof's task stack."""

    def __init__(self, itt):
        self.itt = itt
        self._local = threading.local()
        try:
            os.register_at_fork(after_in_child=self._forget)
        except Exception:
            pass

    def _forget(self):
        # A fork child does not end the tasks its parent's thread had open.
        self._local = threading.local()

    def _stack(self):
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def begin(self, domain, name, ident=0, parent=0):
        """Begins a task; returns its token (or None)."""
        itt = self.itt
        d = itt.domain(domain)
        itt.task_begin(d, ident, parent, itt.handle(name))
        token = [d]
        self._stack().append(token)
        return token

    def end(self, token):
        """Ends `token` (and, first, any task begun after it that is still open)."""
        if token is None:
            return
        stack = self._stack()
        if stack and stack[-1] is token:  # the usual, properly nested case
            stack.pop()
            self.itt.task_end(token[0])
            return
        if not any(t is token for t in stack):
            return
        while stack:
            top = stack.pop()
            self.itt.task_end(top[0])
            if top is token:
                return

    def mark(self, domain, name, ident=0):
        itt = self.itt
        itt.marker(itt.domain(domain), ident, itt.handle(name), 3)  # __itt_marker_scope_thread

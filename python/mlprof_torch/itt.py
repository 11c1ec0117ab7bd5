"""Calls libmlprof.so's ITT collector entry points (it is LD_PRELOADed, so the process's global
symbol scope has them). Tasks nest per thread; `Tracker` keeps Python's own begins and ends
balanced even when a span is ended out of order."""

import ctypes
import os
import sys
import threading


class IttId(ctypes.Structure):
    _fields_ = [("d1", ctypes.c_uint64), ("d2", ctypes.c_uint64), ("d3", ctypes.c_uint64)]


NULL_ID = IttId(0, 0, 0)


class Itt:
    """The entry points; `None` from `load()` when libmlprof.so is not loaded."""

    def __init__(self, lib):
        get = lambda name: getattr(lib, name)  # noqa: E731 (names with leading underscores)
        self._domain_create = get("__itt_domain_create")
        self._domain_create.restype = ctypes.c_void_p
        self._domain_create.argtypes = [ctypes.c_char_p]
        self._handle_create = get("__itt_string_handle_create")
        self._handle_create.restype = ctypes.c_void_p
        self._handle_create.argtypes = [ctypes.c_char_p]
        self.task_begin = get("__itt_task_begin")
        self.task_begin.restype = None
        self.task_begin.argtypes = [ctypes.c_void_p, IttId, IttId, ctypes.c_void_p]
        self.task_end = get("__itt_task_end")
        self.task_end.restype = None
        self.task_end.argtypes = [ctypes.c_void_p]
        self.marker = get("__itt_marker")
        self.marker.restype = None
        self.marker.argtypes = [ctypes.c_void_p, IttId, ctypes.c_void_p, ctypes.c_int]
        self._domains = {}
        self._handles = {}
        # task_begin(domain, handle, id, parent), task_end(domain), marker(domain, id, handle,
        # scope) taking plain integers, as CPython builtins where the interpreter allows (None:
        # through ctypes).
        self.fast = _builtins(lib)

    def domain(self, name):
        d = self._domains.get(name)
        if d is None:
            d = self._domains[name] = self._domain_create(name.encode())
        return d

    def handle(self, name):
        h = self._handles.get(name)
        if h is None:
            h = self._handles[name] = self._handle_create(name.encode("utf-8", "replace"))
        return h


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
    (preload/src/exports/python.rs). (begin, end, marker), or None where the library or the
    interpreter lacks what it takes (then everything goes through ctypes)."""
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
        # Called a few times a training step: the caches are read inline and a zero id is the
        # shared NULL_ID (ctypes copies a structure argument), ~1 µs a span less.
        itt = self.itt
        d = itt._domains.get(domain) or itt.domain(domain)
        h = itt._handles.get(name) or itt.handle(name)
        if itt.fast is not None:
            itt.fast[0](d or 0, h or 0, ident, parent)
        else:
            itt.task_begin(
                d,
                IttId(ident & 0xFFFFFFFFFFFFFFFF, 0, 0) if ident else NULL_ID,
                IttId(parent, 0, 0) if parent else NULL_ID,
                h,
            )
        token = [d]
        try:
            self._local.stack.append(token)
        except AttributeError:
            self._local.stack = [token]
        return token

    def end(self, token):
        """Ends `token` (and, first, any task begun after it that is still open)."""
        if token is None:
            return
        stack = self._stack()
        fast = self.itt.fast
        end = fast[1] if fast is not None else self.itt.task_end
        if stack and stack[-1] is token:  # the usual, properly nested case
            stack.pop()
            end(token[0] or 0)
            return
        if not any(t is token for t in stack):
            return
        while stack:
            top = stack.pop()
            end(top[0] or 0)
            if top is token:
                return

    def mark(self, domain, name, ident=0):
        itt = self.itt
        if itt.fast is not None:
            itt.fast[2](itt.domain(domain) or 0, ident, itt.handle(name) or 0, 3)
            return
        itt.marker(
            itt.domain(domain), IttId(ident & 0xFFFFFFFFFFFFFFFF, 0, 0), itt.handle(name), 3
        )  # __itt_marker_scope_thread

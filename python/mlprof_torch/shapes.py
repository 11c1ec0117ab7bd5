"""`--torch-shapes` (MLPROF_TORCH_SHAPES=1): the input shapes and dtypes of each PyTorch op.

PyTorch's ITT op ranges (emit_itt) carry the op's name only, with or without
record_shapes=True, and the profilers that record shapes (Kineto, the execution-trace
observer) are what we avoid. A TorchFunctionMode sees every Python-level torch call
(torch.conv2d, F.linear, Tensor.add_, ...) with its arguments just before the op's range
begins. For a call with tensor arguments it sends one ITT marker in domain "mlprof.shapes" named
"<function>|<shapes>|<dtypes>", e.g. "conv2d|[32,3,56,56];[64,3,3,3];[64]|float32;float32;float32",
then runs the call. mlprof's reports give the shapes to the first op range that starts after
the marker on the same thread when the names agree (aten::conv2d for conv2d): the outermost op
of that call. Ops that C++ issues by itself (the autograd engine's backward ops) get none.

Like the op ranges, the mode covers the thread that imported torch (and the DataLoader worker
processes, which start from it). Markers are instants: they cannot unbalance the ITT task
stack whatever a call does with its own ranges.
"""

from . import warn

SHAPES = "mlprof.shapes"
# Distinct (function, shapes, dtypes) per process: each is an ITT string handle that
# libmlprof.so keeps for the process's life. Beyond this, new configurations go unmarked.
MAX_CONFIGS = 10000
# Calls that are not ops (attribute access, metadata queries that dispatch nothing), and
# backward (whose ops the engine issues): no marker, no cost beyond the mode's call.
_SKIP = frozenset(
    (
        "__get__",
        "__set__",
        "__delete__",
        "backward",
        "_set_grad_enabled",
        "dim",
        "size",
        "stride",
        "numel",
        "is_contiguous",
        "is_floating_point",
        "is_complex",
        "element_size",
        "data_ptr",
        "__len__",
        "__format__",
        "__repr__",
    )
)
_state = {"on": False}


def install(torch, itt):
    """Enters the mode on this thread, for the rest of the process."""
    from torch.overrides import TorchFunctionMode

    tensor = torch.Tensor
    domain = itt.domain(SHAPES)
    marker = itt.marker
    handles = {}
    dtype_names = {}

    def dtype_name(dtype):
        name = dtype_names.get(dtype)
        if name is None:
            name = dtype_names[dtype] = str(dtype).replace("torch.", "")
        return name

    def describe(values, shapes, dtypes):
        for value in values:
            if isinstance(value, tensor):
                shapes.append("[" + ",".join([str(d) for d in value.shape]) + "]")
                dtypes.append(dtype_name(value.dtype))
            elif isinstance(value, (list, tuple)):
                for item in value:
                    if isinstance(item, tensor):
                        shapes.append("[" + ",".join([str(d) for d in item.shape]) + "]")
                        dtypes.append(dtype_name(item.dtype))

    def mark(func, args, kwargs):
        name = getattr(func, "__name__", None)
        if not name or name in _SKIP or name.startswith("_record_function"):
            return
        shapes = []
        dtypes = []
        describe(args, shapes, dtypes)
        if kwargs:
            describe(kwargs.values(), shapes, dtypes)
        if not shapes:
            return
        key = name + "|" + ";".join(shapes) + "|" + ";".join(dtypes)
        handle = handles.get(key)
        if handle is None:
            if len(handles) >= MAX_CONFIGS:
                return
            handle = handles[key] = itt.handle(key)
        marker(domain, 0, handle, 3)  # __itt_marker_scope_thread

    class ShapesMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if kwargs is None:
                kwargs = {}
            if _state["on"]:
                try:
                    mark(func, args, kwargs)
                except Exception as error:
                    # One failure turns the markers off: the call itself always runs.
                    _state["on"] = False
                    warn("recording op shapes failed", error)
            return func(*args, **kwargs)

    mode = ShapesMode()
    mode.__enter__()
    _state["on"] = True
    return mode

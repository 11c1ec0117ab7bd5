"""What `--torch` instruments once torch / torchvision is imported (see the package doc)."""

import functools
import os
import threading
import weakref
from _thread import get_ident

from . import steps, warn
from .itt import load

PHASE = "mlprof.phase"
DATA = "mlprof.data"
# Set by the main process around DataLoader.__iter__ (workers start there; fork and spawn
# children both inherit it): "main pid:loader serial:epoch".
LOADER_ENV = "MLPROF_TORCH_LOADER"

_itt = load()
_tracker = None
if _itt is not None:
    from .itt import Tracker

    _tracker = Tracker(_itt)

_steps = steps.load()
_local = threading.local()
_state = {"steps": 0, "loaders": 0, "ops": None, "worker": None}
_loader_info = weakref.WeakKeyDictionary()  # DataLoader -> [serial, epochs begun]
_iter_info = weakref.WeakKeyDictionary()  # iterator -> (main pid, serial, epoch)


def batch_id(serial, epoch, index):
    """The id of a batch's spans: loader serial << 48 | epoch << 32 | batch index."""
    return ((serial & 0xFFFF) << 48) | ((epoch & 0xFFFF) << 32) | (index & 0xFFFFFFFF)


def _begin(domain, name, ident=0, parent=0):
    try:
        return _tracker.begin(domain, name, ident, parent)
    except Exception as error:
        warn("recording a span failed", error)
        return None


def _end(token):
    if token is None:
        return
    try:
        _tracker.end(token)
    except Exception as error:
        warn("recording a span failed", error)


def _mark(domain, name, ident):
    try:
        _tracker.mark(domain, name, ident)
    except Exception as error:
        warn("recording a marker failed", error)


def _patch(owner, attr, make):
    """Replaces owner.attr with make(original); skips quietly when it is missing."""
    original = getattr(owner, attr, None)
    if original is None or getattr(original, "_mlprof_wrapped", False):
        return None
    wrapper = make(original)
    try:
        functools.update_wrapper(wrapper, original)
    except Exception:
        pass
    wrapper._mlprof_wrapped = True
    setattr(owner, attr, wrapper)
    return wrapper


# ---- phases -------------------------------------------------------------------------------


def _phase_wrapper(name, guard=None):
    """A wrapper that records the outermost call on a thread as phase task `name`.

    Wrapped around `nn.Module.__call__` it runs for every module of a model, hundreds of times a
    step: a nested call only looks its thread up in a set and calls through (the thread-local
    depth counter it replaces cost ~0.5 µs a module call)."""
    inside = set()  # the threads inside an outermost call of this phase

    def make(original):
        def outermost(thread, args, kwargs):
            token = None
            try:
                inside.add(thread)
                if guard is None or guard(args):
                    token = _begin(PHASE, name, _state["steps"])
            except Exception:
                pass
            try:
                return original(*args, **kwargs)
            finally:
                inside.discard(thread)
                _end(token)

        def wrapper(*args, **kwargs):
            thread = get_ident()
            if thread in inside:
                return original(*args, **kwargs)
            return outermost(thread, args, kwargs)

        return wrapper

    return make


def _is_model_call(args):
    """Module calls that are training forwards: not data transforms, not inside a fetch."""
    if getattr(_local, "fetching", False) or not args:
        return False
    module = type(args[0]).__module__ or ""
    return not module.startswith("torchvision.transforms")


def _step_pre(optimizer, args, kwargs):
    try:
        stack = getattr(_local, "steps", None)
        if stack is None:
            stack = _local.steps = []
        stack.append(_begin(PHASE, "optimizer.step", _state["steps"]) if not stack else None)
    except Exception:
        pass


def _step_post(optimizer, args, kwargs):
    try:
        stack = getattr(_local, "steps", None)
        if stack:
            token = stack.pop()
            if token is not None:
                _state["steps"] += 1
                if _steps is not None:
                    _steps.completed(_state["steps"])
            _end(token)
    except Exception:
        pass


def _step_patches(torch):
    """The phase patches a training step runs through, as (owner, attribute, wrapper maker):
    forward and backward (tests/gpu/torch_step_cost.py switches these on and off)."""
    return [
        (torch.nn.Module, "__call__", _phase_wrapper("forward", _is_model_call)),
        (torch.autograd, "backward", _phase_wrapper("backward")),
    ]


def _install_phases(torch):
    for owner, attr, make in _step_patches(torch):
        _patch(owner, attr, make)
    save = _patch(torch, "save", _phase_wrapper("torch.save"))
    load = _patch(torch, "load", _phase_wrapper("torch.load"))
    serialization = getattr(torch, "serialization", None)
    if serialization is not None:
        if save is not None:
            serialization.save = save
        if load is not None:
            serialization.load = load
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    register_optimizer_step_pre_hook(_step_pre)
    register_optimizer_step_post_hook(_step_post)


# ---- op ranges ----------------------------------------------------------------------------


def _enable_ops(torch):
    """emit_itt for the whole run (the importing thread and the threads that inherit its
    profiler state, such as autograd's). A profiler the program starts itself takes over
    while it runs: PyTorch allows one profiler per thread, so ours steps aside when the
    program prepares or enables its own (torch.profiler.profile with or without a schedule,
    torch.autograd.profiler.profile, emit_itt, emit_nvtx all go through the switches in
    torch.autograd.profiler) and comes back when the program disables it."""
    if os.environ.get("MLPROF_TORCH_OPS", "1") == "0":
        return
    itt = getattr(getattr(torch, "profiler", None), "itt", None)
    if itt is None or not itt.is_available():
        return
    module = torch.autograd.profiler
    switches = [
        getattr(module, name, None) for name in ("_prepare_profiler", "_enable_profiler", "_disable_profiler")
    ]
    if any(switch is None for switch in switches):
        return
    ops = module.emit_itt()
    owner = {"pid": os.getpid(), "thread": threading.get_ident(), "on": False}

    def ours(enter):
        # Our own enable/disable, through the same (patched) switches.
        _local.ours = True
        try:
            if enter:
                ops.entered = False
                ops.__enter__()
            else:
                ops.__exit__(None, None, None)
            owner["on"] = enter
        except Exception:
            pass
        finally:
            _local.ours = False

    def on_this_thread():
        return owner["pid"] == os.getpid() and owner["thread"] == threading.get_ident()

    def step_aside():
        if owner["on"] and on_this_thread():
            ours(False)
            _local.stepped_aside = True

    def come_back():
        if getattr(_local, "stepped_aside", False):
            _local.stepped_aside = False
            ours(True)

    def program_starts(original):
        def wrapper(*args, **kwargs):
            if not getattr(_local, "ours", False):
                step_aside()
            return original(*args, **kwargs)

        return wrapper

    def program_stops(original):
        def wrapper(*args, **kwargs):
            if getattr(_local, "ours", False):
                return original(*args, **kwargs)
            try:
                return original(*args, **kwargs)
            finally:
                come_back()

        return wrapper

    _patch(module, "_prepare_profiler", program_starts)
    _patch(module, "_enable_profiler", program_starts)
    _patch(module, "_disable_profiler", program_stops)
    ours(True)
    _state["ops"] = ops

    def stop():
        # At exit, in the process (and on the thread) that enabled it.
        if owner["on"] and on_this_thread():
            ours(False)

    import atexit

    atexit.register(stop)


# ---- DataLoader ---------------------------------------------------------------------------


def _close_consume():
    token = getattr(_local, "consume", None)
    if token is not None:
        _local.consume = None
        _end(token)


def _iter_wrapper(original):
    def __iter__(self):
        previous = os.environ.get(LOADER_ENV)
        tagged = False
        try:
            _close_consume()
            info = _loader_info.get(self)
            if info is None:
                info = _loader_info[self] = [_state["loaders"], 0]
                _state["loaders"] += 1
            serial, epoch = info[0], info[1]
            info[1] += 1
            os.environ[LOADER_ENV] = "%d:%d:%d" % (os.getpid(), serial, epoch)
            tagged = True
        except Exception:
            pass
        try:
            iterator = original(self)
        finally:
            if tagged:
                try:
                    if previous is None:
                        os.environ.pop(LOADER_ENV, None)
                    else:
                        os.environ[LOADER_ENV] = previous
                except Exception:
                    pass
        try:
            if tagged:
                _iter_info[iterator] = (os.getpid(), serial, epoch)
        except Exception:
            pass
        return iterator

    return __iter__


def _next_wrapper(original):
    def __next__(self):
        token = None
        ident = None
        parent = 0
        try:
            _close_consume()
            pid, serial, epoch = _iter_info.get(self) or (os.getpid(), 0, 0)
            parent = pid
            index = getattr(self, "_rcvd_idx", None)
            if index is None:
                index = getattr(self, "_num_yielded", 0)
            ident = batch_id(serial, epoch, index)
            exhausted = False
            try:
                exhausted = self._num_yielded >= len(self)
            except Exception:
                pass
            if not exhausted:
                token = _begin(DATA, "batch.wait", ident, parent)
            if not hasattr(self, "_rcvd_idx"):
                # Single-process loading: the batch is fetched right here.
                _local.batch = (ident, parent)
        except Exception:
            pass
        try:
            batch = original(self)
        except BaseException:
            _local.batch = None
            _end(token)
            raise
        _local.batch = None
        _end(token)
        if ident is not None and token is not None:
            _local.consume = _begin(DATA, "batch.consume", ident, parent)
        return batch

    return __next__


def _get_data_wrapper(original):
    def _get_data(self):
        result = original(self)
        try:
            index = result[0]
            if isinstance(index, int) and index > self._rcvd_idx and getattr(self, "_in_order", True):
                pid, serial, epoch = _iter_info.get(self) or (os.getpid(), 0, 0)
                _mark(DATA, "batch.out_of_order", batch_id(serial, epoch, index))
        except Exception:
            pass
        return result

    return _get_data


class _IndexQueue:
    """A worker's index queue: notes the batch index of each request it hands out."""

    def __init__(self, inner, resume_type):
        self._inner = inner
        self._resume_type = resume_type

    def get(self, *args, **kwargs):
        request = self._inner.get(*args, **kwargs)
        try:
            worker = _state["worker"]
            if resume_type_matches(request, self._resume_type):
                worker[2] += 1
            elif isinstance(request, tuple) and len(request) == 2 and isinstance(request[0], int):
                _local.batch = (batch_id(worker[1], worker[2], request[0]), worker[0])
        except Exception:
            pass
        return request

    def __getattr__(self, name):
        return getattr(self._inner, name)


def resume_type_matches(request, resume_type):
    return resume_type is not None and isinstance(request, resume_type)


def _worker_loop_wrapper(original, resume_type):
    def _worker_loop(*args, **kwargs):
        try:
            main, serial, epoch = (int(x) for x in os.environ.get(LOADER_ENV, "").split(":"))
        except Exception:
            main, serial, epoch = os.getppid(), 0, 0
        try:
            _state["worker"] = [main, serial, epoch]
            if len(args) > 2:
                args = args[:2] + (_IndexQueue(args[2], resume_type),) + args[3:]
            elif "index_queue" in kwargs:
                kwargs["index_queue"] = _IndexQueue(kwargs["index_queue"], resume_type)
        except Exception:
            pass
        return original(*args, **kwargs)

    return _worker_loop


def _collate_wrapper(collate):
    def collate_fn(*args, **kwargs):
        batch = getattr(_local, "batch", None)
        token = _begin(DATA, "collate", batch[0], batch[1]) if batch else None
        try:
            return collate(*args, **kwargs)
        finally:
            _end(token)

    collate_fn._mlprof_wrapped = True
    return collate_fn


def _fetch_wrapper(original):
    def fetch(self, possibly_batched_index):
        batch = getattr(_local, "batch", None)
        if not batch:
            return original(self, possibly_batched_index)
        token = None
        try:
            collate = getattr(self, "collate_fn", None)
            if collate is not None and not getattr(collate, "_mlprof_wrapped", False):
                self.collate_fn = _collate_wrapper(collate)
            token = _begin(DATA, "batch.fetch", batch[0], batch[1])
            _local.fetching = True
        except Exception:
            pass
        try:
            return original(self, possibly_batched_index)
        finally:
            _local.fetching = False
            _local.batch = None
            _end(token)

    return fetch


def _loader_step_patches(dataloader):
    """The main process's DataLoader patches a training step runs through (batch.wait,
    batch.consume), as `_step_patches` gives them."""
    return [
        (dataloader._BaseDataLoaderIter, "__next__", _next_wrapper),
        (dataloader._MultiProcessingDataLoaderIter, "_get_data", _get_data_wrapper),
    ]


def _install_dataloader(torch):
    from torch.utils.data import dataloader
    from torch.utils.data._utils import fetch, worker

    _patch(dataloader.DataLoader, "__iter__", _iter_wrapper)
    for owner, attr, make in _loader_step_patches(dataloader):
        _patch(owner, attr, make)
    for fetcher in ("_MapDatasetFetcher", "_IterableDatasetFetcher"):
        _patch(getattr(fetch, fetcher), "fetch", _fetch_wrapper)
    resume_type = getattr(worker, "_ResumeIteration", None)
    loop = _patch(worker, "_worker_loop", lambda original: _worker_loop_wrapper(original, resume_type))
    if loop is not None:
        # Spawned workers get the target by reference: it must resolve to this same object.
        loop.__module__ = worker.__name__
        loop.__qualname__ = "_worker_loop"


# ---- torchvision transforms ---------------------------------------------------------------


def _transform_span(t):
    batch = getattr(_local, "batch", None) or (0, 0)
    return _begin(DATA, "transform:" + type(t).__name__, batch[0], batch[1])


def _compose_call(original):
    def __call__(self, img):
        for t in self.transforms:
            token = _transform_span(t)
            try:
                img = t(img)
            finally:
                _end(token)
        return img

    return __call__


def _compose_v2_forward(original):
    def forward(self, *inputs):
        needs_unpacking = len(inputs) > 1
        outputs = inputs if needs_unpacking else inputs[0]
        for t in self.transforms:
            token = _transform_span(t)
            try:
                outputs = t(*inputs)
            finally:
                _end(token)
            inputs = outputs if needs_unpacking else (outputs,)
        return outputs

    return forward


def _enable_shapes(torch):
    """`--torch-shapes`: a marker with the input shapes before each op (see shapes.py)."""
    if os.environ.get("MLPROF_TORCH_SHAPES", "0") != "1" or os.environ.get("MLPROF_TORCH_OPS", "1") == "0":
        return
    from . import shapes

    shapes.install(torch, _itt)


def _on_torch(torch):
    if _tracker is None:
        warn("libmlprof.so's ITT entry points are not loaded")
        return
    for step in (_enable_ops, _enable_shapes, _install_phases, _install_dataloader):
        try:
            step(torch)
        except Exception as error:
            warn("{} failed".format(step.__name__.strip("_")), error)


def _on_transforms(module):
    if _tracker is None:
        return
    compose = getattr(module, "Compose", None)
    if compose is not None and callable(vars(compose).get("__call__")):
        _patch(compose, "__call__", _compose_call)


def _on_transforms_v2(module):
    if _tracker is None:
        return
    compose = getattr(module, "Compose", None)
    if compose is not None and "forward" in vars(compose):
        _patch(compose, "forward", _compose_v2_forward)


IMPORT_HOOKS = {
    "torch": _on_torch,
    "torchvision.transforms": _on_transforms,
    "torchvision.transforms.v2": _on_transforms_v2,
}

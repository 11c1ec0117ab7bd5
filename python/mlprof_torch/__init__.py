"""mlprof's PyTorch hook (`mlprof-collect --torch`).

`install()` only adds an import hook to `sys.meta_path`. When the program imports `torch`,
`torchvision.transforms` or `torchvision.transforms.v2`, the module is imported as usual and
then instrumented (`mlprof_torch.hooks`):

* PyTorch op ranges for the whole run (`torch.autograd.profiler.emit_itt`), domain "PyTorch";
* training phases as ITT tasks in domain "mlprof.phase": forward, backward, optimizer.step,
  torch.save, torch.load;
* the DataLoader and torchvision transforms in domain "mlprof.data": batch.fetch, collate,
  transform:<ClassName> (in the process that loads the batch, usually a worker), batch.wait and
  batch.consume (in the main process), and a batch.out_of_order marker.

The tasks go to libmlprof.so's exported ITT entry points through ctypes. Nothing here may break
the program: every failure is swallowed, and at most one warning line is printed.
"""

import sys

_WARNED = [False]
_HOOKS = {}


def warn(what, error=None):
    """Prints one warning line for the whole process, at most."""
    if _WARNED[0]:
        return
    _WARNED[0] = True
    try:
        detail = "" if error is None else f": {type(error).__name__}: {error}"
        sys.stderr.write(f"mlprof: warning: --torch hook: {what}{detail} (continuing without it)\n")
    except Exception:
        pass


def _run_hook(name, module):
    callback = _HOOKS.pop(name, None)
    if callback is None:
        return
    try:
        callback(module)
    except Exception as error:
        warn(f"instrumenting {name} failed", error)


class _Loader:
    """Delegates to the real loader, then instruments the module it executed."""

    def __init__(self, inner, name):
        self._inner = inner
        self._name = name

    def create_module(self, spec):
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        inner = self._inner
        # Put the real loader back first: the module must look untouched.
        try:
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = inner
            module.__loader__ = inner
        except Exception:
            pass
        inner.exec_module(module)
        _run_hook(self._name, module)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _Finder:
    """A sys.meta_path finder that only watches the modules in `_HOOKS`."""

    def __init__(self):
        self._busy = set()

    def find_spec(self, name, path=None, target=None):
        if name not in _HOOKS or name in self._busy:
            return None
        self._busy.add(name)
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self:
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    break
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            spec.loader = _Loader(spec.loader, name)
            return spec
        except Exception:
            return None
        finally:
            self._busy.discard(name)

    def invalidate_caches(self):
        pass


def install():
    """Adds the import hook (once). Modules already imported are instrumented now."""
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    from . import hooks

    _HOOKS.update(hooks.IMPORT_HOOKS)
    for name in list(_HOOKS):
        if name in sys.modules:
            _run_hook(name, sys.modules[name])
    sys.meta_path.insert(0, _Finder())

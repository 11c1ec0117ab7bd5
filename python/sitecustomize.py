"""mlprof's Python start-up hook (installed by `mlprof-collect --torch`).

The launcher puts the directory holding this file first on PYTHONPATH. We install mlprof's
lazy PyTorch hook (nothing happens until torch / torchvision is imported), then run the
sitecustomize module that would have run without us — the next one on sys.path — so that a
user's or a distribution's own sitecustomize is never shadowed.
"""


def _mlprof_install():
    try:
        import mlprof_torch

        mlprof_torch.install()
    except Exception as error:  # never break the program
        try:
            import sys

            sys.stderr.write(f"mlprof: warning: --torch hook not installed: {error!r}\n")
        except Exception:
            pass


def _mlprof_chain():
    """Runs the next sitecustomize on sys.path (if any) as `sitecustomize`."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    rest = []
    seen_self = False
    for entry in sys.path:
        try:
            same = os.path.abspath(entry or os.getcwd()) == here
        except Exception:
            same = False
        if same:
            seen_self = True
            continue
        if seen_self:
            rest.append(entry)
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    # Errors propagate as they would have without mlprof (site.py reports them).
    spec.loader.exec_module(module)


_mlprof_install()
_mlprof_chain()

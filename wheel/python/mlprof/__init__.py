"""mlprof, installed from its wheel: a profiler for machine-learning training jobs.

The programs are ``mlprof-collect`` and ``mlprof`` in the environment's ``bin/``; this package
holds ``libmlprof.so`` and a few helpers for scripts and notebooks:

- ``preload_path()``: the library's absolute path, as ``mlprof-collect --print-preload`` prints it;
- ``program(name)``: the absolute path of ``mlprof`` or ``mlprof-collect`` of this installation;
- ``summary(run)``: ``mlprof summary --json RUN`` as a dict (e.g.
  ``pandas.DataFrame.from_dict(summary("run.bin")["calls"], orient="index")``);
- ``start()``, ``stop()`` and ``with capture():``: mark the capture range in the script, for
  ``mlprof-collect --capture-range=itt`` (they act like ITT resume and pause; without a
  collector, or without that option, they do nothing);
- ``python -m mlprof ARGS`` runs ``mlprof ARGS``, ``python -m mlprof collect ARGS`` runs
  ``mlprof-collect ARGS``.
"""

import contextlib
import ctypes
import json
import os
import shutil
import subprocess
import sys

__all__ = ["PROGRAMS", "capture", "preload_path", "program", "start", "stop", "summary"]

PROGRAMS = ("mlprof", "mlprof-collect")


def preload_path():
    """The absolute path of the installed libmlprof.so."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libmlprof.so")
    if not os.path.isfile(path):
        raise FileNotFoundError(
            "%s is missing: this mlprof package was not installed from its wheel; "
            "reinstall with `pip install --force-reinstall mlprof`" % path
        )
    return path


def program(name="mlprof"):
    """The absolute path of the program ``name`` ("mlprof" or "mlprof-collect") installed with
    this package: the wheel's file list (RECORD) names it in whatever scripts directory pip
    chose (a venv's bin/, ~/.local/bin, a --prefix or --target), so PATH does not matter."""
    if name not in PROGRAMS:
        raise ValueError("no mlprof program %r; the programs are %s" % (name, ", ".join(PROGRAMS)))
    try:
        from importlib.metadata import PackageNotFoundError, files

        recorded = files("mlprof") or []
    except (ImportError, PackageNotFoundError):
        recorded = []
    for entry in recorded:
        if entry.name == name and entry.parent.name in ("bin", "Scripts"):
            path = os.path.abspath(str(entry.locate()))
            if os.path.isfile(path):
                return path
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(
            "cannot find %s: it is not in this package's file list nor on PATH; "
            "reinstall with `pip install --force-reinstall mlprof`" % name
        )
    return found


def summary(run):
    """``mlprof summary --json RUN`` as a dict (its shape: README, "mlprof")."""
    done = subprocess.run(
        [program("mlprof"), "summary", "--json", os.fspath(run)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError("mlprof summary %s failed: %s" % (run, done.stderr.strip()))
    return json.loads(done.stdout)


def _main(argv=None):
    """``python -m mlprof``: replaces this Python with the program, so that its exit status,
    signals and terminal are the program's own."""
    args = list(sys.argv[1:] if argv is None else argv)
    name = "mlprof"
    if args[:1] == ["collect"]:
        name, args = "mlprof-collect", args[1:]
    path = program(name)
    os.execv(path, [path, *args])


_ENTRIES = {}


def _entry(name):
    """libmlprof.so's entry point ``name`` when the library is loaded in this process (a
    collector preloaded it), else None; looked up once, so that a range's ``stop()`` makes no
    call the range would record."""
    if name not in _ENTRIES:
        try:
            function = getattr(ctypes.CDLL(None), name)
            function.argtypes = []
            function.restype = ctypes.c_int
        except (OSError, AttributeError):
            function = None
        _ENTRIES[name] = function
    return _ENTRIES[name]


def start():
    """Opens a capture range: with ``mlprof-collect --capture-range=itt``, every process of the
    job records from here (like ITT's ``__itt_resume``). True when a range opened; False when
    nothing changed (no collector, another capture option, a range already open, or past the
    last range ``--capture-range-end`` allows)."""
    function = _entry("mlprof_capture_start")
    return bool(function()) if function is not None else False


def stop():
    """Closes the capture range (like ITT's ``__itt_pause``): the job goes on unrecorded. True
    when a range closed."""
    function = _entry("mlprof_capture_stop")
    return bool(function()) if function is not None else False


@contextlib.contextmanager
def capture():
    """``with mlprof.capture():`` records the block (``start()`` on entry, ``stop()`` on exit,
    also when it raises)."""
    _entry("mlprof_capture_stop")
    start()
    try:
        yield
    finally:
        stop()

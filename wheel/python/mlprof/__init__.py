"""mlprof, installed from its wheel: a profiler for machine-learning training jobs.

The programs are ``mlprof-collect`` and ``mlprof`` in the environment's ``bin/``; this package
holds ``libmlprof.so`` and a few helpers for scripts and notebooks:

- ``preload_path()``: the library's absolute path, as ``mlprof-collect --print-preload`` prints it;
- ``program(name)``: the absolute path of ``mlprof`` or ``mlprof-collect`` of this installation;
- ``summary(run)``: ``mlprof summary --json RUN`` as a dict (e.g.
  ``pandas.DataFrame.from_dict(summary("run.bin")["calls"], orient="index")``);
- ``python -m mlprof ARGS`` runs ``mlprof ARGS``, ``python -m mlprof collect ARGS`` runs
  ``mlprof-collect ARGS``.
"""

import json
import os
import shutil
import subprocess
import sys

__all__ = ["PROGRAMS", "preload_path", "program", "summary"]

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

"""The --torch hook's ITT calls (python/mlprof_torch/itt.py), both ways: libmlprof.so's CPython
builtins and the ctypes fallback. Each way records, in domain mlprof.phase, 3 tasks
`via.<way>` (ids 1, 2, 3, parent 7), each around a task `via.<way>.inner` (id 0), and one
marker (id 42); the builtins must exist under mlprof-collect, and a builtin given what is not
an integer must raise TypeError without recording. Prints `itt_builtins: ok` at the end."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from mlprof_torch import itt  # noqa: E402


def record(way, handle):
    tracker = itt.Tracker(handle)
    for k in (1, 2, 3):
        outer = tracker.begin("mlprof.phase", "via." + way, k, 7)
        tracker.begin("mlprof.phase", "via.%s.inner" % way, 0, 0)
        tracker.end(outer)  # ends the inner task first
    tracker.mark("mlprof.phase", "via.%s.mark" % way, 42)


fast = itt.load()
assert fast is not None and fast.builtins, "no builtins under the collector"
d = fast.domain("mlprof.phase")
for call, bad in [
    (fast.task_begin, (d, "1", 0, 0)),
    (fast.task_begin, (d, 1, 0, None)),
    (fast.task_end, (1.5,)),
    (fast.marker, (d, [], 0, 3)),
]:
    try:
        call(*bad)
    except TypeError:
        continue
    raise AssertionError("no TypeError for %r" % (bad,))
assert fast.task_begin() is None and fast.task_end(1, 2) is None, "a miscounted call does nothing"
record("builtins", fast)

itt._builtins = lambda lib: None  # the fallback: PyPy, Python < 3.8, an older library
slow = itt.load()
assert slow is not None and not slow.builtins
record("ctypes", slow)
print("itt_builtins: ok")

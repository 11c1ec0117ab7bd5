"""`mlprof-collect --torch --steps A-B`: the capture range of training steps A to B.

Steps are counted by the completed `optimizer.step()` calls of the process (DataLoader
workers make none): step k runs from the return of step k-1's `optimizer.step()` (the job's
start for k = 1, where the collector starts the range open) to the return of its own. The
range is opened and closed through libmlprof.so's `mlprof_capture_steps`, which flips the
capture gate every process of the tree shares, so workers follow.
"""

import ctypes
import os

from . import warn


class Steps:
    """Opens the range when step `first` begins and closes it when step `last` ends."""

    def __init__(self, first, last, flip):
        self.first, self.last, self.flip = first, last, flip

    def completed(self, count):
        """Step `count` (1-based) returned from `optimizer.step()`."""
        if count == self.first - 1:
            self.flip(1)
        if count == self.last:
            self.flip(0)


def parse(value):
    """`A-B` as (A, B) with 1 <= A <= B; ValueError otherwise."""
    first, last = (int(part) for part in value.split("-"))
    if not 1 <= first <= last:
        raise ValueError(value)
    return first, last


def load():
    """The `--steps` range of this process, or None (no --steps, or no libmlprof.so loaded)."""
    value = os.environ.get("MLPROF_STEPS", "")
    if not value:
        return None
    try:
        first, last = parse(value)
    except ValueError:
        warn("MLPROF_STEPS=%r is not A-B with 1 <= A <= B; recording every step" % value)
        return None
    try:
        flip = ctypes.CDLL(None).mlprof_capture_steps
    except (OSError, AttributeError):
        return None
    flip.argtypes = [ctypes.c_int]
    flip.restype = ctypes.c_int
    return Steps(first, last, flip)

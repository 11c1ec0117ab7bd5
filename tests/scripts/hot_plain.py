"""Calls libhot_tasks.so's run_alpha through ctypes from a function (no ITT, no third-party
module: any CPython runs it), for the Python frames of `mlprof-collect --sample`:

    hot_plain.py LIBRARY MS
"""

import ctypes
import sys


def work(lib, ms):
    lib.run_alpha.restype = ctypes.c_double
    lib.run_alpha(ms)


work(ctypes.CDLL(sys.argv[1]), int(sys.argv[2]))

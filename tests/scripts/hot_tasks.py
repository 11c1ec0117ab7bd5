"""ITT tasks "alpha" and "beta" from Python (Intel's ittapi) around calls of
libhot_tasks.so through ctypes (tests/programs/hot_lib.c), for `mlprof-collect --sample`:
each task's samples are its hot function's, under its C caller and Python's ctypes frames.

    hot_tasks.py LIBRARY MS
"""

import ctypes
import sys

import ittapi


def main():
    lib = ctypes.CDLL(sys.argv[1])
    ms = int(sys.argv[2])
    lib.run_alpha.restype = ctypes.c_double
    lib.run_beta.restype = ctypes.c_long
    domain = ittapi.domain("hot")
    with ittapi.task("alpha", domain=domain):
        lib.run_alpha(ms)
    with ittapi.task("beta", domain=domain):
        lib.run_beta(ms)


if __name__ == "__main__":
    main()

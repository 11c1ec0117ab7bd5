"""Shared plumbing of the bench workloads (argument parsing, seeding, the torch.profiler switch).

Every workload script takes:
    DATA_DIR                 where its generated data is cached (created if missing)
    --prepare                only generate the data (untimed), then exit
    --scale X                multiply the number of steps / reads (default 1.0)
    --threads N              torch intra-op threads (default 1)
    --torch-profile FILE     wrap the timed loop in torch.profiler.profile(activities=[CPU])
                             and export a Chrome trace to FILE at the end
and prints `key=value` lines on stdout: loop_s= (the timed loop), export_s= (profiler export,
0 without it), steps=, and workload-specific counters.
"""

import argparse
import contextlib
import os
import random
import time


def parse(description, extra=None):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("data_dir")
    ap.add_argument("--prepare", action="store_true", help="generate the data and exit")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the amount of work")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: OpenMP spinning on a shared 2-core "
        "machine makes 2 threads several times slower and very noisy)",
    )
    ap.add_argument(
        "--torch-profile",
        metavar="FILE",
        help="profile the loop with torch.profiler (CPU) and export a Chrome trace to FILE",
    )
    if extra:
        extra(ap)
    args = ap.parse_args()
    os.makedirs(args.data_dir, exist_ok=True)
    return args


def setup_torch(args, seed=0):
    """Seeds every generator, makes algorithms deterministic, sets the thread count."""
    import numpy as np
    import torch

    torch.set_num_threads(max(1, args.threads))
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)


def marker_ok(path, version):
    try:
        with open(path) as f:
            return f.read().strip() == version
    except OSError:
        return False


def write_marker(path, version):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(version + "\n")
    os.replace(tmp, path)


@contextlib.contextmanager
def maybe_profiled(trace_file):
    """Yields a `step()` callable; with trace_file, the body runs under torch.profiler."""
    if not trace_file:
        yield lambda: None
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        yield prof.step
    t0 = time.monotonic()
    prof.export_chrome_trace(trace_file)
    maybe_profiled.export_s = time.monotonic() - t0


maybe_profiled.export_s = 0.0


def report(**kv):
    kv.setdefault("export_s", f"{maybe_profiled.export_s:.3f}")
    for k, v in kv.items():
        print(f"{k}={v}", flush=True)

#!/usr/bin/env python3
"""What `--torch-shapes` adds per op: one Python-level torch call (torch.relu on an 8x8 tensor:
one op range, one shape marker) timed N times in a process under `mlprof-collect --torch`
and under `mlprof-collect --torch-shapes`, the two alternating --repeat times so that a loaded
machine disturbs both alike; the minimum and the median per call of each, and their difference.

    bench/torch_shapes_cost.py [--bin-dir target/release] [--python PY] [--calls N] [--repeat N]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def inner(calls):
    import torch

    x = torch.randn(8, 8)
    relu = torch.relu
    for _ in range(2000):
        relu(x)
    start = time.perf_counter_ns()
    for _ in range(calls):
        relu(x)
    print(json.dumps({"ns_per_call": (time.perf_counter_ns() - start) / calls}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=os.path.join(os.path.dirname(__file__), "..", "target", "release"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--inner", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        inner(args.inner)
        return 0
    collect = os.path.abspath(os.path.join(args.bin_dir, "mlprof-collect"))
    me = os.path.abspath(__file__)
    results = {"--torch": [], "--torch-shapes": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            for flag in results:
                cmd = [collect, "-q", "--no-energy", flag, "-o", os.path.join(tmp, "run.bin")]
                cmd += ["--", args.python, me, "--inner", str(args.calls)]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                results[flag].append(json.loads(out.strip().splitlines()[-1])["ns_per_call"])
    for flag, values in results.items():
        print(
            f"  mlprof-collect {flag:<15} min {min(values):7.0f} ns/call  median {statistics.median(values):7.0f}"
        )
    added_min = min(results["--torch-shapes"]) - min(results["--torch"])
    added_median = statistics.median(results["--torch-shapes"]) - statistics.median(results["--torch"])
    print(f"  --torch-shapes adds {added_min:.0f} ns per op (minimum), {added_median:.0f} ns (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The collector's own CPU at a paced call rate, per wake-up, for builds compared in the same rounds.

Each run: `mlprof-collect -q --no-energy -- bench/build/calls write_null RATE*SECONDS 1 RATE` (one
thread, paced in 1 ms ticks). Shortly before the job ends it reads `/proc/PID/task/*/schedstat`
of the collector's threads: the main thread's CPU time and its number of time slices (each a
wake-up: a pass), and the writer thread's CPU. This isolates what a pass costs from the job's
noisy CPU time, which `bench/rate_cost.py` must subtract. Variants run interleaved, the order
rotated each round. Reported per variant: the median µs of main-thread CPU a slice, with a
bootstrap 95 % confidence interval, the slices, and the main + writer CPU as % of one core.

    python3 bench/pass_cost.py [--rate 1000] [--seconds 8] [--rounds 10] NAME=BIN_DIR [NAME=BIN_DIR ...]

bench/calls.c is built into --build-dir (default bench/build) by bench/run.py's build step.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run as common  # noqa: E402  (builds bench/calls.c)
from stats import median_ci  # noqa: E402

# The schedstat read happens this long before the job's end, while every thread still exists.
READ_BEFORE_END_S = 0.4


def thread_times(pid):
    """{thread name: (CPU ns, time slices)} of process `pid`'s threads."""
    times = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run_ns, _wait_ns, slices = (int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
        cpu, count = times.get(name, (0, 0))
        times[name] = (cpu + run_ns, count + slices)
    return times


def one_run(bin_dir, exe, rate, seconds, out):
    cmd = [os.path.join(bin_dir, "mlprof-collect"), "-q", "--no-energy", "-o", out, "--"]
    cmd += [exe, "write_null", str(int(rate * seconds)), "1", str(rate)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(seconds - READ_BEFORE_END_S)
    times = thread_times(proc.pid)
    if proc.wait() != 0:
        sys.exit(f"pass_cost.py: {' '.join(cmd)} exited with {proc.returncode}")
    main_ns, slices = times.get("mlprof-collect", (0, 0))
    writer_ns, _ = times.get("mlprof-writer", (0, 0))
    per_slice_us = main_ns / 1e3 / slices if slices else float("nan")
    share = (main_ns + writer_ns) / 1e9 / (seconds - READ_BEFORE_END_S) * 100
    return per_slice_us, slices, share


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "variants", nargs="+", help="NAME=BIN_DIR (a directory with mlprof-collect, libmlprof.so)"
    )
    ap.add_argument("--rate", type=int, default=1000, help="calls a second (default 1000)")
    ap.add_argument("--seconds", type=float, default=8.0, help="length of each run (default 8)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--build-dir", default=os.path.join(HERE, "build"), help="where bench/calls.c is built")
    args = ap.parse_args()
    if args.rate < 1 or args.rounds < 1 or args.seconds <= 2 * READ_BEFORE_END_S:
        sys.exit("pass_cost.py: --rate and --rounds must be positive, --seconds above 0.8")
    variants = []
    for text in args.variants:
        name, sep, bin_dir = text.partition("=")
        if not sep or not name or not os.path.isfile(os.path.join(bin_dir, "mlprof-collect")):
            sys.exit(f"pass_cost.py: a variant is NAME=BIN_DIR with BIN_DIR/mlprof-collect, not {text!r}")
        variants.append((name, bin_dir))
    exe, _shim, _cmds = common.build(args.build_dir)
    results = {name: [] for name, _ in variants}
    with tempfile.TemporaryDirectory(prefix="mlprof-pass-cost-") as tmp:
        out = os.path.join(tmp, "run.bin")
        for r in range(args.rounds):
            turn = r % len(variants)
            for name, bin_dir in variants[turn:] + variants[:turn]:
                per_slice, slices, share = one_run(bin_dir, exe, args.rate, args.seconds, out)
                results[name].append((per_slice, slices, share))
                print(
                    f"round {r + 1}/{args.rounds} {name}: {per_slice:.1f} µs a slice, {slices} slices, "
                    f"{share:.3f} % of a core",
                    file=sys.stderr,
                )
    print(f"{args.rate:,} calls/s, {args.seconds:g} s runs, {args.rounds} interleaved rounds\n")
    print("| variant | main thread µs a slice, median [95 % CI] | slices | main + writer, % of a core |")
    print("|---|--:|--:|--:|")
    for name, _ in variants:
        rows = results[name]
        med, lo, hi = median_ci([row[0] for row in rows])
        slices = sorted(row[1] for row in rows)[len(rows) // 2]
        share, _, _ = median_ci([row[2] for row in rows])
        interval = f" [{lo:.1f}, {hi:.1f}]" if lo is not None else ""
        print(f"| {name} | {med:.1f}{interval} | {slices} | {share:.3f} % |")


if __name__ == "__main__":
    main()

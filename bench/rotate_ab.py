#!/usr/bin/env python3
"""Several builds of `mlprof` converting (or exporting) the same run, in rotated order, with
each build's per-round ratio to the first (python3 standard library and bench/stats.py):

    python3 bench/rotate_ab.py RUN.bin NAME=MLPROF NAME=MLPROF... [--rounds 30] [--export]

Round r runs the builds starting from the (r mod n)-th, so each build runs first, last and in
between equally often; drift on a shared machine falls on all of them. Prints, per build, the
medians of wall, CPU (user + system, the command's own, from wait4) and user seconds, and for
each build after the first the per-round ratio to the first: median and 95 % bootstrap
interval. Outputs go to a temporary path removed after every command. For two builds,
bench/convert_ab.py and bench/export_bench.py say more (RSS, bytes per event, second passes).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stats

KEYS = ("wall", "cpu", "user")


def run_once(binary, run, out, export):
    if export:
        argv = [binary, "export", "--parquet", out, run]
    else:
        argv = [binary, "convert", "-o", out + ".pftrace", run]
    start = time.monotonic()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - start
    shutil.rmtree(out, ignore_errors=True)
    if os.path.exists(out + ".pftrace"):
        os.remove(out + ".pftrace")
    if status != 0:
        sys.exit(f"{' '.join(argv)} failed (status {status})")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "user": usage.ru_utime}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run")
    ap.add_argument("builds", nargs="+", help="NAME=PATH of an mlprof binary; the first is the baseline")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--export", action="store_true", help="time `export --parquet` instead of `convert`")
    args = ap.parse_args()
    builds = [b.split("=", 1) for b in args.builds]
    out = os.path.join(tempfile.gettempdir(), f"mlprof-rotate-{os.getpid()}")
    results = {name: {} for name, _ in builds}
    for rnd in range(args.rounds):
        k = rnd % len(builds)
        for name, binary in builds[k:] + builds[:k]:
            results[name][rnd] = run_once(binary, args.run, out, args.export)
        print(f"round {rnd + 1} of {args.rounds}", file=sys.stderr)
    base = builds[0][0]
    print(f"{args.rounds} rounds, rotated; medians, and the per-round ratio to {base} [95 % CI]\n")
    for name, _ in builds:
        medians = {k: statistics.median(r[k] for r in results[name].values()) for k in KEYS}
        line = f"{name}: " + ", ".join(f"{k} {medians[k]:.3f} s" for k in KEYS)
        if name != base:
            ratios = [
                f"{k} {stats.fmt_ratio_ci(*stats.median_ci(stats.paired(results[name], results[base], k)))}"
                for k in KEYS
            ]
            line += "; " + "; ".join(ratios)
        print(line)


if __name__ == "__main__":
    main()

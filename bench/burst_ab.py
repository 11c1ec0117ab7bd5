#!/usr/bin/env python3
"""Issue 10's burst, one run at a time, for builds (or settings) compared in the same rounds.

Each run: `mlprof-collect --no-energy -- bench/build/calls write_null N THREADS` (THREADS threads
writing N one-byte writes each to /dev/null as fast as they can: on 2 vCPUs every CPU is busy
and the collector must win one). Per run it records the share of records dropped and the
collector's CPU per recorded event (the process tree's CPU minus the application's own
`cpu_s=`). Variants run interleaved, the order rotated each round, so that the machine's
drift falls on all of them alike. Reported per variant: the median drop share with a bootstrap
95 % confidence interval, the mean, how many runs dropped more than 0.1 % (issue 10's target),
and the collector's CPU per event; with two variants, the per-round CPU difference too.

A burst's drops come in some runs and not others (when the scheduler gives the collector a
slice), so compare the mean and the count of runs over 0.1 % over 30 rounds or more, not one
median.

    python3 bench/burst_ab.py [--rounds 30] [--n 2500000] [--threads 2] [--out RUN.bin] \\
        NAME=BIN_DIR[:VAR=VALUE,...] [NAME=BIN_DIR[:VAR=VALUE,...] ...]

    e.g. python3 bench/burst_ab.py base=/tmp/base new=target/release
         python3 bench/burst_ab.py plain=target/release small=target/release:MLPROF_X=1

bench/calls.c is built into --build-dir (default bench/build) by bench/run.py's build step.
"""

import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run as common  # noqa: E402  (builds bench/calls.c, runs commands)
from stats import median_ci  # noqa: E402


def parse_variant(text):
    name, sep, rest = text.partition("=")
    if not sep or not name:
        sys.exit(f"burst_ab.py: a variant is NAME=BIN_DIR[:VAR=VALUE,...], not {text!r}")
    bin_dir, _, env_text = rest.partition(":")
    env = dict(item.split("=", 1) for item in env_text.split(",") if item)
    collect = os.path.join(os.path.abspath(bin_dir), "mlprof-collect")
    if not os.access(collect, os.X_OK):
        sys.exit(f"burst_ab.py: {collect} is not an executable")
    return name, collect, env


def one_run(collect, env, exe, n, threads, out):
    cmd = [collect, "--no-energy", "--out", out, "--", exe, "write_null", str(n), str(threads)]
    try:
        done = common.run_cmd(cmd, env_extra=env, echo=False)
    except common.BenchError as e:
        sys.exit(f"burst_ab.py: {e}")
    # The tree's CPU (RUSAGE_CHILDREN delta) minus the application's own: the collector's.
    tree_cpu, app_cpu, stderr = done["tree_cpu_s"], float(done["kv"]["cpu_s"]), done["stderr"]
    events = int(re.search(r"recorded (\d+) calls", stderr).group(1))
    dropped = re.search(r"(\d+) RECORDS WERE DROPPED", stderr)
    dropped = int(dropped.group(1)) if dropped else 0
    return 100 * dropped / (events + dropped), (tree_cpu - app_cpu) * 1e9 / events


def ci(med, lo, hi, fmt, unit=""):
    """`med unit [lo, hi]`, without the interval under 3 runs (median_ci gives none)."""
    return f"{med:{fmt}}{unit}" + ("" if lo is None else f" [{lo:{fmt}}, {hi:{fmt}}]")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="+", help="NAME=BIN_DIR[:VAR=VALUE,...]")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--n", type=int, default=2_500_000, help="writes per thread")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="/tmp/mlprof-burst-ab.bin", help="run file (overwritten each run)")
    ap.add_argument("--build-dir", default=os.path.join(HERE, "build"), help="where bench/calls.c is built")
    args = ap.parse_args()
    if args.rounds < 1 or args.n < 1 or args.threads < 1:
        sys.exit("burst_ab.py: --rounds, --n and --threads must be positive")
    variants = [parse_variant(v) for v in args.variants]
    names = [name for name, _, _ in variants]
    if len(set(names)) != len(names):
        sys.exit("burst_ab.py: variant names must differ")
    exe, _shim, _cmds = common.build(args.build_dir)
    drops = {name: [] for name in names}
    cpu = {name: [] for name in names}
    for r in range(args.rounds):
        turn = r % len(variants)
        for name, collect, env in variants[turn:] + variants[:turn]:
            share, ns = one_run(collect, env, exe, args.n, args.threads, args.out)
            drops[name].append(share)
            cpu[name].append(ns)
            print(
                f"round {r + 1}/{args.rounds} {name}: dropped {share:.2f} %, collector {ns:.1f} ns/event",
                file=sys.stderr,
            )
    if os.path.exists(args.out):
        os.remove(args.out)
    print(f"{args.threads} threads x {args.n:,} one-byte writes, {args.rounds} interleaved rounds\n")
    print(
        "| variant | dropped, median [95 % CI] | mean | runs over 0.1 % | collector CPU ns/event [95 % CI] |"
    )
    print("|---|--:|--:|--:|--:|")
    for name in names:
        over = sum(share > 0.1 for share in drops[name])
        mean = sum(drops[name]) / len(drops[name])
        print(
            f"| {name} | {ci(*median_ci(drops[name]), '.2f', ' %')} | {mean:.2f} % | {over} of {args.rounds} | "
            f"{ci(*median_ci(cpu[name]), '.1f')} |"
        )
    if len(names) == 2:
        a, b = names
        diffs = median_ci([y - x for x, y in zip(cpu[a], cpu[b])])
        print(f"\n{b} − {a}, collector CPU per round: {ci(*diffs, '+.1f')} ns/event")
    for name in names:
        print(f"\n{name}, dropped % per run: " + ", ".join(f"{share:.2f}" for share in drops[name]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

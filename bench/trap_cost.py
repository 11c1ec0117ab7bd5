#!/usr/bin/env python3
"""What complete mode (`mlprof-collect --all-syscalls`) adds per system call (stdlib only).

Each round runs, in rotated order: `trapped cost N` (tests/programs/trapped.c: N getppid
through syscall(), best of 5 loops, ns per call) bare, under mlprof-collect (default mode: no
hook sees a raw syscall()), under `mlprof-collect --all-syscalls`, and under `strace -f`
(N/20 calls: strace is slow); and bench/sud_floor.c, which traps the same calls into a
minimal handler that only makes them (the floor of any SIGSYS-based design here) and times a
signal round trip alone (tgkill to self, empty handler). Reported: per-pair differences to
the bare call, medians with bootstrap 95 % intervals (bench/stats.py), against issue 16's
target of <= 2 us per trapped call.

    python3 bench/trap_cost.py [--rounds 15] [--calls 20000] [--bin-dir target/release]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from stats import median_ci  # noqa: E402


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [float(x) for x in out.split()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--bin-dir", default=os.path.join(REPO, "target", "release"))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="trap-cost-")
    prog, floor = os.path.join(tmp, "trapped"), os.path.join(tmp, "sud_floor")
    subprocess.run(
        ["gcc", "-O1", "-pthread", "-o", prog, os.path.join(REPO, "tests/programs/trapped.c")], check=True
    )
    subprocess.run(["gcc", "-O2", "-o", floor, os.path.join(HERE, "sud_floor.c")], check=True)
    collect = os.path.join(args.bin_dir, "mlprof-collect")
    run_bin = os.path.join(tmp, "run.bin")
    n = str(args.calls)
    variants = {
        "bare": lambda: run([prog, "cost", n])[0],
        "mlprof (default mode)": lambda: run(
            [collect, "-q", "--no-energy", "--out", run_bin, "--", prog, "cost", n]
        )[0],
        "mlprof --all-syscalls": lambda: run(
            [collect, "-q", "--no-energy", "--all-syscalls", "--out", run_bin, "--", prog, "cost", n]
        )[0],
        "floor": lambda: run([floor, n]),
    }
    if shutil.which("strace"):
        variants["strace -f"] = lambda: run(
            ["strace", "-f", "-o", "/dev/null", prog, "cost", str(args.calls // 20)]
        )[0]
    names = list(variants)
    samples = {k: [] for k in names + ["floor: signal round trip"]}
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            value = variants[name]()
            if name == "floor":
                samples["floor"].append(value[0])
                samples["floor: signal round trip"].append(value[1])
            else:
                samples[name].append(value)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    bare = samples["bare"]
    print(
        f"{args.rounds} rounds, {args.calls} getppid calls per run (strace: {args.calls // 20}); ns per call"
    )
    print("| variant | ns/call (median) | added to the bare call: median [95% CI] |")
    print("|---|--:|--:|")
    for name, values in samples.items():
        med, _, _ = median_ci(values)
        if name in ("bare", "floor: signal round trip"):
            print(f"| {name} | {med:.0f} | – |")
            continue
        diff = median_ci([v - b for v, b in zip(values, bare)])
        lo = f"{diff[1]:.0f}" if diff[1] is not None else "?"
        hi = f"{diff[2]:.0f}" if diff[2] is not None else "?"
        print(f"| {name} | {med:.0f} | {diff[0]:+.0f} [{lo}, {hi}] |")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

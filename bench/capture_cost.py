#!/usr/bin/env python3
"""What a hook costs outside a capture range (issue 38's target: no more than a process with
no collector). Each round runs, in rotated order, `calls OP N 1` (bench/calls.c) four ways:
bare; with libmlprof.so preloaded and no collector (`no_session`: the library has no ring to
join); under `mlprof-collect --capture-range=itt`, which this program never opens (`paused`:
every call passes the gate); under the collector recording (`recording`). Reported: per
variant the min over rounds, and the median of per-round differences with a 95 % bootstrap
interval.

    capture_cost.py [--rounds N] [--calls N] [--ops read,clock_gettime] [--bin-dir DIR]
"""

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as common  # run_cmd
import stats


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=2000000)
    ap.add_argument("--ops", default="read,clock_gettime")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--bin-dir", default=os.path.join(here, "..", "target", "release"))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mlprof-capture-cost-")
    calls = os.path.join(tmp, "calls")
    source = os.path.join(here, "calls.c")
    subprocess.run(["gcc", "-O2", "-pthread", "-U_FORTIFY_SOURCE", "-o", calls, source, "-ldl"], check=True)
    bin_dir = os.path.abspath(args.bin_dir)
    collect = os.path.join(bin_dir, "mlprof-collect")
    preload = {
        "LD_PRELOAD": os.path.join(bin_dir, "libmlprof.so"),
        "MLPROF_SESSION": f"bench-none-{os.getpid()}",
    }
    for op in args.ops.split(","):
        job = [calls, op, str(args.calls), "1"]
        out = os.path.join(tmp, f"{op}.bin")
        variants = {
            "bare": (job, {}),
            "no_session": (job, preload),
            "paused": ([collect, "--quiet", "--capture-range=itt", "--out", out, "--"] + job, {}),
            "recording": ([collect, "--quiet", "--out", out, "--"] + job, {}),
        }
        names = list(variants)
        samples = {name: {} for name in names}
        for r in range(args.rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                cmd, env = variants[name]
                res = common.run_cmd(cmd, env, echo=False)
                samples[name][r] = {"ns": float(res["kv"]["ns_per_call"]), "cpu_s": res["tree_cpu_s"]}
        print(f"{op}, {args.calls} calls, {args.rounds} rounds:")
        for name in names:
            ns = [s["ns"] for s in samples[name].values()]
            print(f"  {name:10}: min {min(ns):.1f} ns/call, median {stats.median_ci(ns)[0]:.1f}")
        for name, base in [
            ("no_session", "bare"),
            ("paused", "bare"),
            ("paused", "no_session"),
            ("recording", "bare"),
        ]:
            med, lo, hi = stats.median_ci(stats.paired(samples[name], samples[base], "ns", op="diff"))
            mins = min(s["ns"] for s in samples[name].values()) - min(s["ns"] for s in samples[base].values())
            interval = f"[{lo:+.1f}, {hi:+.1f}]" if lo is not None else "(too few pairs)"
            print(f"  {name} vs {base}: min vs min {mins:+.1f} ns; median of pairs {med:+.1f} ns {interval}")


if __name__ == "__main__":
    main()

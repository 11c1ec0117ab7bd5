#!/usr/bin/env python3
"""What `mlprof-collect --sites` adds to a recorded call made from Python (issue 36's target:
at most 20 ns, min vs min). Each round runs, in rotated order, a Python loop of CALLS
`os.lseek(fd, 0, 0)` calls (a hooked libc call that costs little itself) under the collector
without and with `--sites`, and bare; each run times its loop and prints ns per call. Reported:
per variant the min over rounds and the median of per-round differences against the collector
without sites, with a 95 % bootstrap interval, and CPU time of the whole tree.

    sites_cost.py [--rounds N] [--calls N] [--bin-dir DIR] [--python PY] [--before-bin-dir DIR]
                  [--native]

--native times a C loop of 1-byte reads of /dev/zero instead (bench/calls.c, one thread): no
Python on the thread, so each call's site is its native caller. --before-sites runs that build with --sites too (`before_sites`). --before-bin-dir adds the collector of another build (`before`, no --sites) to each round: what
the sites code costs a call when --sites is off.
"""

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as common  # run_cmd
import stats

LOOP = """
import os, sys, time
calls = int(sys.argv[1])
fd = os.open("/dev/null", os.O_RDONLY)
lseek = os.lseek
for _ in range(calls // 10):
    lseek(fd, 0, 0)
t0 = time.perf_counter_ns()
for _ in range(calls):
    lseek(fd, 0, 0)
elapsed = time.perf_counter_ns() - t0
print(f"ns_per_call={elapsed / calls:.3f}")
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=400000)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--bin-dir", default=os.path.join(here, "..", "target", "release"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--before-bin-dir", default=None)
    ap.add_argument("--native", action="store_true", help="a C loop (native callers)")
    ap.add_argument("--before-sites", action="store_true", help="run the other build with --sites too")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mlprof-sites-cost-")
    if args.native:
        calls = os.path.join(tmp, "calls")
        source = os.path.join(here, "calls.c")
        subprocess.run(
            ["gcc", "-O2", "-pthread", "-U_FORTIFY_SOURCE", "-o", calls, source, "-ldl"], check=True
        )
        job = [calls, "read", str(args.calls), "1"]
    else:
        loop = os.path.join(tmp, "loop.py")
        with open(loop, "w") as f:
            f.write(LOOP)
        job = [args.python, loop, str(args.calls)]
    collect = os.path.join(os.path.abspath(args.bin_dir), "mlprof-collect")
    variants = {
        "bare": job,
        "mlprof": [collect, "--quiet", "--out", os.path.join(tmp, "plain.bin"), "--"] + job,
        "sites": [collect, "--quiet", "--sites", "--out", os.path.join(tmp, "sites.bin"), "--"] + job,
    }
    if args.before_bin_dir:
        before = os.path.join(os.path.abspath(args.before_bin_dir), "mlprof-collect")
        variants["before"] = [before, "--quiet", "--out", os.path.join(tmp, "before.bin"), "--"] + job
        if args.before_sites:
            variants["before_sites"] = [
                before,
                "--quiet",
                "--sites",
                "--out",
                os.path.join(tmp, "bs.bin"),
                "--",
            ] + job
    names = list(variants)
    samples = {name: {} for name in names}
    for r in range(args.rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            res = common.run_cmd(variants[name], {}, echo=False)
            samples[name][r] = {"ns": float(res["kv"]["ns_per_call"]), "cpu_s": res["tree_cpu_s"]}
        print(f"round {r}: " + "  ".join(f"{n} {samples[n][r]['ns']:.1f} ns" for n in names), flush=True)
    for name in names:
        ns = [s["ns"] for s in samples[name].values()]
        print(f"{name:7}: min {min(ns):.1f} ns/call, median {stats.median_ci(ns)[0]:.1f}")
    pairs = [("mlprof", "bare"), ("sites", "bare"), ("sites", "mlprof")]
    pairs += [("mlprof", "before")] if "before" in samples else []
    pairs += [("before_sites", "before"), ("sites", "before_sites")] if "before_sites" in samples else []
    for name, base in pairs:
        med, lo, hi = stats.median_ci(stats.paired(samples[name], samples[base], "ns", op="diff"))
        mins = min(s["ns"] for s in samples[name].values()) - min(s["ns"] for s in samples[base].values())
        cpu = stats.median_ci(stats.paired(samples[name], samples[base], "cpu_s"))
        interval = f"[{lo:+.1f}, {hi:+.1f}]" if lo is not None else "(too few pairs)"
        print(
            f"{name} vs {base}: min vs min {mins:+.1f} ns; median of pairs {med:+.1f} ns "
            f"{interval}; tree CPU {stats.fmt_ratio_ci(*cpu)}"
        )


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A/B timing of two `mlprof` binaries converting the same runs (python3 standard library only).

    python3 bench/convert_ab.py --base OLD/mlprof --new target/release/mlprof [--rounds 6] \
        [--format perfetto] RUN.bin[:EVENTS] ...

Each round converts every run with both binaries, in an order that alternates round by round
(so drift on a loaded machine falls on both), through `/usr/bin/time` (wall, user+system CPU,
peak RSS). Prints, per run and binary, the median of each with its distribution-free 95%
confidence interval (order statistics of the binomial(n, 1/2); with 6 rounds that is the
range of all 6, 96.9%), events per CPU second (the one-core rate: all the CPU the process
used, its trace-writing thread included, as if it all ran on one core),
and the trace's bytes per event. User and system CPU are also given apart: system time (the
kernel copying the run in and the trace out, page-cache writeback) varies most with the
other load on a shared machine. EVENTS is the run's event count (synth_run prints it);
without it the count is read from the tool's "wrote N events" line.
"""

import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stats


def median_ci(values, level=0.95):
    """Median and the order-statistic interval around it covering at least `level`."""
    xs = sorted(values)
    n = len(xs)
    # Smallest k with P(k <= B(n, 1/2) < n - k) >= level, searched from the widest.
    best = (xs[0], xs[-1])
    for k in range(n // 2 + 1):
        lo, hi = k, n - 1 - k
        if lo > hi:
            break
        coverage = sum(math.comb(n, i) for i in range(lo + 1, hi + 1)) / 2**n
        if coverage >= level:
            best = (xs[lo], xs[hi])
        else:
            break
    return statistics.median(xs), best


def run_once(binary, run, out, fmt):
    fd, tfile = tempfile.mkstemp(prefix="mlprof-ab-")
    os.close(fd)
    cmd = [
        "/usr/bin/time",
        "-f",
        "%e %U %S %M",
        "-o",
        tfile,
        binary,
        "convert",
        run,
        "-o",
        out,
        "--format",
        fmt,
    ]
    p = subprocess.run(cmd, capture_output=True, text=True)
    with open(tfile) as f:
        wall, user, system, rss_kb = f.read().split()[-4:]
    os.unlink(tfile)
    if p.returncode != 0:
        sys.exit(f"exit status {p.returncode}: {' '.join(cmd)}\n{p.stderr[-800:]}")
    m = re.search(r"wrote (\d+) events", p.stderr)
    size = os.path.getsize(out)
    os.unlink(out)
    return {
        "wall": float(wall),
        "cpu": float(user) + float(system),
        "user": float(user),
        "sys": float(system),
        "rss": int(rss_kb) / 1024,
        "bytes": size,
        "events": int(m.group(1)) if m else None,
        "second_pass": "read the run twice" in p.stderr,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--format", default="perfetto", choices=["perfetto", "chrome"])
    ap.add_argument("--tmp-dir", default=tempfile.gettempdir())
    ap.add_argument("runs", nargs="+", help="RUN.bin[:EVENTS]")
    args = ap.parse_args()
    variants = [("base", args.base), ("new", args.new)]
    ext = ".pftrace" if args.format == "perfetto" else ".json"
    out = os.path.join(args.tmp_dir, f"mlprof-ab-{os.getpid()}{ext}")
    results = {}
    for rnd in range(args.rounds):
        order = variants if rnd % 2 == 0 else variants[::-1]
        for spec in args.runs:
            run, _, events = spec.partition(":")
            for name, binary in order:
                r = run_once(binary, run, out, args.format)
                if events:
                    r["events"] = int(events)
                results.setdefault((run, name), []).append(r)
                print(
                    f"round {rnd + 1} {os.path.basename(run)} {name}: wall {r['wall']:.2f} s, "
                    f"cpu {r['cpu']:.2f} s, rss {r['rss']:.1f} MiB",
                    file=sys.stderr,
                )
    n = args.rounds
    full = 1 - 2 / 2**n
    if n < 2:
        note = " (one round: no interval, the brackets repeat the value)"
    elif full < 0.95:
        note = f" (only {full:.0%} with {n} rounds: the intervals are the full ranges)"
    else:
        note = ""
    print(f"Medians [distribution-free 95% CI{note}], {n} interleaved rounds.\n")
    print(
        "| run | binary | wall s | CPU s | user s | sys s | M events per CPU s | M events per user s "
        "| peak RSS MiB | bytes/event | 2nd pass |"
    )
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for (run, name), rs in results.items():
        events = rs[0]["events"]
        wall, (wl, wh) = median_ci([r["wall"] for r in rs])
        cpu, (cl, ch) = median_ci([r["cpu"] for r in rs])
        user, (ul, uh) = median_ci([r["user"] for r in rs])
        system, (yl, yh) = median_ci([r["sys"] for r in rs])
        rate, (rl, rh) = median_ci([events / r["cpu"] / 1e6 for r in rs])
        urate, (ql, qh) = median_ci([events / max(r["user"], 0.01) / 1e6 for r in rs])
        rss, (sl, sh) = median_ci([r["rss"] for r in rs])
        print(
            f"| {os.path.basename(run)} | {name} | {wall:.2f} [{wl:.2f}, {wh:.2f}] | {cpu:.2f} [{cl:.2f}, {ch:.2f}] "
            f"| {user:.2f} [{ul:.2f}, {uh:.2f}] | {system:.2f} [{yl:.2f}, {yh:.2f}] "
            f"| {rate:.2f} [{rl:.2f}, {rh:.2f}] | {urate:.2f} [{ql:.2f}, {qh:.2f}] | {rss:.1f} [{sl:.1f}, {sh:.1f}] "
            f"| {rs[0]['bytes'] / events:.1f} | {sum(r['second_pass'] for r in rs)}/{len(rs)} |"
        )
    # Paired by round (the two binaries ran back to back): the steadier comparison on a
    # machine whose speed drifts from round to round.
    print("\nPaired new / base, per round (median [95 % bootstrap CI]):\n")
    for spec in args.runs:
        run = spec.partition(":")[0]
        base = dict(enumerate(results[(run, "base")]))
        new = dict(enumerate(results[(run, "new")]))
        cells = []
        for key in ("wall", "cpu", "user"):
            ratios = stats.paired(new, base, key)
            cells.append(f"{key} {stats.fmt_ratio_ci(*stats.median_ci(ratios))}")
        print(f"- {os.path.basename(run)}: " + "; ".join(cells))


if __name__ == "__main__":
    main()

"""`mlprof export --parquet` before/after (BENCHMARKS.md, "Ranks, merge and the Parquet export"):
runs each given mlprof binary on the same run file, interleaved (order rotated every round),
and reports per binary the median and 95 % bootstrap interval of wall seconds, CPU seconds
(user + system, the command's own, from wait4), events per wall second and per CPU second,
peak RSS, and the events table's bytes per event; then the paired after/before ratios.

    python3 bench/export_bench.py RUN.bin NAME=BINARY NAME=BINARY... [--rounds 7]

The first binary is the baseline of the ratios. Each export writes into a fresh folder that is
removed after the round (the page cache holds RUN.bin after the first round).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stats import fmt_ratio_ci, median_ci, paired


def run_once(binary: str, run: str, out: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    start = time.monotonic()
    with tempfile.TemporaryFile() as err:
        child = subprocess.Popen(
            [binary, "export", "--parquet", out, run], stdout=subprocess.DEVNULL, stderr=err
        )
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.monotonic() - start
        err.seek(0)
        said = err.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{binary} failed: {said}")
    # "(events N, ...; X MB, B bytes/event in events, ...)"
    events = int(said.split("(events ", 1)[1].split(",")[0])
    events_dir = os.path.join(out, "events")
    events_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(events_dir) for f in fs)
    cpu = usage.ru_utime + usage.ru_stime
    shutil.rmtree(out, ignore_errors=True)
    return {
        "wall": wall,
        "cpu": cpu,
        "eps_wall": events / wall / 1e6,
        "eps_cpu": events / cpu / 1e6,
        "rss_mb": usage.ru_maxrss / 1024,
        "bytes_per_event": events_bytes / events,
        "events": events,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("binaries", nargs="+", help="NAME=PATH; the first is the baseline")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    variants = [b.split("=", 1) for b in args.binaries]
    out = tempfile.mkdtemp(prefix="mlprof-export-bench-")
    samples = {name: {} for name, _ in variants}
    try:
        for rnd in range(args.rounds):
            order = variants[rnd % len(variants) :] + variants[: rnd % len(variants)]
            for name, binary in order:
                samples[name][rnd] = run_once(binary, args.run, out)
            line = "  ".join(
                f"{n}: {samples[n][rnd]['wall']:.2f} s wall {samples[n][rnd]['cpu']:.2f} s CPU"
                for n, _ in variants
            )
            print(f"round {rnd + 1}: {line}", flush=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    events = next(iter(samples[variants[0][0]].values()))["events"]
    print(f"\n{events} events, {args.rounds} rounds, median [95 % CI]")
    keys = [
        ("wall", "wall s", 2),
        ("cpu", "CPU s", 2),
        ("eps_wall", "M events/wall s", 2),
        ("eps_cpu", "M events/CPU s", 2),
        ("rss_mb", "peak RSS MB", 0),
        ("bytes_per_event", "bytes/event (events)", 2),
    ]
    for name, _ in variants:
        cells = []
        for key, label, digits in keys:
            med, lo, hi = median_ci([s[key] for s in samples[name].values()])
            ci = f" [{lo:.{digits}f}, {hi:.{digits}f}]" if lo is not None else ""
            cells.append(f"{label} {med:.{digits}f}{ci}")
        print(f"{name}: " + "; ".join(cells))
    base = variants[0][0]
    for name, _ in variants[1:]:
        for key, label, _ in keys[:4]:
            med, lo, hi = median_ci(paired(samples[name], samples[base], key))
            print(f"{name} vs {base}, {label}: {fmt_ratio_ci(med, lo, hi)}")


if __name__ == "__main__":
    sys.exit(main())

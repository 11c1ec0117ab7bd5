#!/usr/bin/env python3
"""Speed, output size and memory of `mlprof convert` (Perfetto protobuf and Chrome JSON) and
`mlprof summary --json` on long runs (python3 standard library only).

Generates synthetic run.bin files of N events with the mlprof-format example `synth_run`
(RunWriter only, no collector: several processes and threads, opens with paths, reads and
writes on those fds, closes, mmaps, clock aggregates), then times

    mlprof convert RUN -o TRACE.pftrace      (convert-perfetto)
    mlprof convert RUN -o TRACE.json         (convert-chrome)
    mlprof summary --json RUN

--repeat times each, interleaved, and measures their peak resident memory (`/usr/bin/time -v`
"Maximum resident set size", else getrusage(RUSAGE_CHILDREN).ru_maxrss of a fresh helper
process), to show the events/s and whether memory grows with the run's length. The big files
are removed at the end.

    python3 bench/convert_bench.py [--n 1000000,10000000] [--repeat 3] [--tools convert-perfetto,...]
                                   [--tmp-dir /tmp] [--out FILE.md]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import run as common  # noqa: E402  (bench/run.py: machine info, formatting)

log = common.log
md_table = common.md_table
BenchError = common.BenchError

# Estimated bytes per event on disk: run.bin (64 B records + metadata) and the traces.
RUN_BYTES_PER_EVENT = 66
JSON_BYTES_PER_EVENT = 260
PERFETTO_BYTES_PER_EVENT = 80
TOOLS = ("convert-perfetto", "convert-chrome", "summary")

# Runs a command in a child and prints the child's peak RSS (KiB) as JSON: the fallback when
# /usr/bin/time is missing (RUSAGE_CHILDREN of a fresh process is exactly that one child).
RSS_HELPER = r"""
import json, resource, subprocess, sys, time
t0 = time.monotonic()
p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
wall = time.monotonic() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stderr.buffer.write(p.stderr)
sys.stdout.buffer.write(p.stdout)
sys.stdout.write("\n@@RSS@@" + json.dumps({"rc": p.returncode, "wall": wall, "maxrss_kb": ru.ru_maxrss,
                                            "cpu": ru.ru_utime + ru.ru_stime}) + "\n")
"""


def gnu_time():
    t = "/usr/bin/time"
    if not os.path.exists(t):
        return None
    try:
        p = subprocess.run([t, "-v", "true"], capture_output=True, text=True, timeout=10)
        return t if "Maximum resident set size" in p.stderr else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def measured(cmd, timeout, time_bin, verbose):
    """Runs cmd; returns (stdout, stderr, wall s, cpu s, peak RSS bytes)."""
    line = common.cmdline(cmd)
    if verbose:
        log(f"  $ {line}")
    if time_bin:
        fd, tfile = tempfile.mkstemp(prefix="mlprof-time-")
        os.close(fd)
        full = [time_bin, "-v", "-o", tfile] + cmd
    else:
        tfile = None
        full = [sys.executable, "-c", RSS_HELPER] + cmd
    t0 = time.monotonic()
    try:
        p = subprocess.run(full, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"timed out after {timeout}s: {line}") from None
    wall = time.monotonic() - t0
    out, err = p.stdout, p.stderr
    if time_bin:
        with open(tfile) as f:
            tv = f.read()
        os.unlink(tfile)
        kv = {}
        for ln in tv.splitlines():
            k, _, v = ln.strip().rpartition(": ")
            kv[k] = v
        rc = p.returncode
        rss = int(kv.get("Maximum resident set size (kbytes)", "0")) * 1024
        cpu = float(kv.get("User time (seconds)", "0")) + float(kv.get("System time (seconds)", "0"))
    else:
        out, _, tail = out.rpartition("\n@@RSS@@")
        info = json.loads(tail)
        rc, wall, rss, cpu = info["rc"], info["wall"], info["maxrss_kb"] * 1024, info["cpu"]
    if rc != 0:
        raise BenchError(f"exit status {rc}: {line}\n{err.strip()[-800:]}")
    return out, err, wall, cpu, rss


def build_synth(verbose):
    cmd = ["cargo", "build", "--release", "-p", "mlprof-format", "--example", "synth_run"]
    log(f"  $ {common.cmdline(cmd)}")
    p = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise BenchError(f"build failed: {common.cmdline(cmd)}\n{p.stdout[-2000:]}")
    return os.path.join(REPO, "target", "release", "examples", "synth_run")


def fits(n, free, with_json):
    # One trace at a time is on disk (each is removed once measured).
    need = n * (RUN_BYTES_PER_EVENT + (JSON_BYTES_PER_EVENT if with_json else PERFETTO_BYTES_PER_EVENT))
    return need * 1.2 + (1 << 30) < free


def main():
    ap = argparse.ArgumentParser(
        description="mlprof convert/summary speed and memory on long runs (see bench/README.md)"
    )
    ap.add_argument("--n", default="1000000,10000000", help="comma list of run lengths in events")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each tool per N (interleaved)")
    ap.add_argument("--tools", default=",".join(TOOLS), help=f"comma list of {', '.join(TOOLS)}")
    ap.add_argument("--threads", type=int, default=4, help="synth_run threads per process")
    ap.add_argument("--procs", type=int, default=3, help="synth_run processes (1 trainer + workers)")
    ap.add_argument("--tmp-dir", default=tempfile.gettempdir(), help="where the runs and traces go")
    ap.add_argument(
        "--json-to-null",
        action="store_true",
        help="convert to /dev/null (no trace size; saves disk and write time)",
    )
    ap.add_argument(
        "--bin-dir", default=os.environ.get("MLPROF_BIN_DIR", os.path.join(REPO, "target", "release"))
    )
    ap.add_argument("--synth", help="synth_run binary (default: build the example with cargo)")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--out", help="also write the Markdown report to this file")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    sizes = common.csv_list(args.n, lambda s: int(float(s)))
    tools = common.csv_list(args.tools, str)
    if not tools or any(t not in TOOLS for t in tools):
        ap.error(f"--tools takes {', '.join(TOOLS)}")
    if not sizes or min(sizes) < 1 or args.repeat < 1:
        ap.error("--n values and --repeat must be >= 1")

    report = ["# mlprof convert / summary on long runs", ""]
    info = common.machine_info()
    time_bin = gnu_time()
    info.append(
        (
            "peak memory from",
            f"{time_bin} -v (Maximum resident set size)"
            if time_bin
            else "getrusage(RUSAGE_CHILDREN).ru_maxrss of a helper process",
        )
    )
    report.append(
        md_table(
            ["machine", ""],
            [[k, v] for k, v in info] + [["command", common.cmdline([sys.executable] + sys.argv)]],
        )
    )
    report.append("")
    for k, v in info:
        log(f"{k}: {v}")
    cli = os.path.join(args.bin_dir, "mlprof")
    if not os.path.exists(cli):
        log(f"ERROR: {cli} missing (run `cargo build --release`)")
        return 2
    snap = tempfile.mkdtemp(prefix="mlprof-bin-")
    cli = shutil.copy2(cli, os.path.join(snap, "mlprof"))
    try:
        synth = args.synth or build_synth(args.verbose)
    except BenchError as e:
        log(f"ERROR: {e}")
        return 2

    work = tempfile.mkdtemp(prefix="mlprof-convert-", dir=args.tmp_dir)
    notes, errors, rows, gen_rows = [], [], [], []
    results = {}
    try:
        # Disk check: fall back to smaller runs rather than fill the disk.
        plan = []
        for n in sizes:
            free = shutil.disk_usage(work).free
            m = n
            with_json = "convert-chrome" in tools and not args.json_to_null
            while m > 1000 and not fits(m, free, with_json):
                m //= 2
            if m != n:
                notes.append(
                    f"N={n:,} does not fit the free space of {args.tmp_dir} ({free / 1e9:.1f} GB "
                    f"free): ran N={m:,} instead."
                )
                log(f"NOTE: {notes[-1]}")
            plan.append(m)
        for n in plan:
            run = os.path.join(work, f"run-{n}.bin")
            trace = os.devnull if args.json_to_null else os.path.join(work, f"trace-{n}.json")
            pftrace = os.path.join(work, f"trace-{n}.pftrace")
            log(f"== N={n:,}: generating {run}")
            cmd = [synth, run, str(n), "--threads", str(args.threads), "--procs", str(args.procs)]
            out, _, wall, cpu, rss = measured(cmd, args.timeout, time_bin, args.verbose)
            kv = dict(f.split("=", 1) for f in out.split() if "=" in f)
            size = os.path.getsize(run)
            clock = int(kv.get("clock_calls", 0))
            gen_rows.append(
                [
                    f"{n:,}",
                    f"{size / 1e6:,.1f}",
                    f"{size / n:.1f}",
                    f"{clock:,}",
                    f"{wall:.2f}",
                    f"{n / wall / 1e6:.2f}",
                    f"{rss / 2**20:.1f}",
                ]
            )
            for _rnd in range(args.repeat):
                for tool in tools:
                    out_file = {"convert-chrome": trace, "convert-perfetto": pftrace}.get(tool)
                    if out_file:
                        fmt = "chrome" if tool == "convert-chrome" else "perfetto"
                        cmd = [cli, "convert", run, "-o", out_file, "--format", fmt]
                    else:
                        cmd = [cli, "summary", "--json", run]
                    try:
                        out, err, wall, cpu, rss = measured(cmd, args.timeout, time_bin, args.verbose)
                    except BenchError as e:
                        errors.append(f"N={n:,} {tool}: {e}")
                        log(f"ERROR: {errors[-1]}")
                        continue
                    s = {"wall": wall, "cpu": cpu, "rss": rss, "out_bytes": None, "events": None}
                    if out_file:
                        if out_file != os.devnull:
                            s["out_bytes"] = os.path.getsize(out_file)
                            os.unlink(out_file)
                        s["events"] = n
                    else:
                        try:
                            j = json.loads(out)
                            s["events"] = int(j.get("events", 0))
                            if s["events"] != n + clock:
                                errors.append(
                                    f"N={n:,} summary: events={s['events']:,}, expected "
                                    f"{n + clock:,} (N + aggregated clock reads)"
                                )
                        except ValueError as e:
                            errors.append(f"N={n:,} summary printed invalid JSON: {e}")
                    results.setdefault((n, tool), []).append(s)
                    log(
                        f"   N={n:,} {tool:8s} {wall:7.2f} s  cpu {cpu:6.2f} s  "
                        f"peak RSS {rss / 2**20:7.1f} MiB  {n / wall / 1e6:.2f} M events/s"
                    )
            os.unlink(run)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(snap, ignore_errors=True)

    rss_by = {}
    for n in plan:
        for tool in tools:
            xs = results.get((n, tool))
            if not xs:
                rows.append([tool, f"{n:,}", "FAILED"] + [""] * 6)
                continue
            wall = statistics.median(s["wall"] for s in xs)
            rss = statistics.median(s["rss"] for s in xs)
            rss_by[(tool, n)] = rss
            ob = [s["out_bytes"] for s in xs if s["out_bytes"] is not None]
            rows.append(
                [
                    tool,
                    f"{n:,}",
                    str(len(xs)),
                    f"{wall:.2f}",
                    f"{min(s['wall'] for s in xs):.2f} – {max(s['wall'] for s in xs):.2f}",
                    f"{statistics.median(s['cpu'] for s in xs):.2f}",
                    f"{n / wall / 1e6:.2f}",
                    f"{rss / 2**20:.1f}",
                    f"{statistics.median(ob) / 1e6:,.0f} ({statistics.median(ob) / n:.0f} B/event)"
                    if ob
                    else "–",
                ]
            )
    report.append("## Synthetic runs\n")
    report.append(
        f"`synth_run OUT N --threads {args.threads} --procs {args.procs}`: a trainer and "
        f"{args.procs - 1} forked workers, {args.threads} threads each; dataset reads "
        "(open64, ioctl, lseek64, 1-6 reads, close on 20k paths cycled), checkpoint writes "
        "(open64, 64 KiB writes, fsync, close), stdio log lines, mmap/munmap, aggregated "
        "clock_gettime (≈2 per event).\n"
    )
    report.append(
        md_table(
            [
                "N events",
                "run.bin MB",
                "bytes/event",
                "aggregated clock reads",
                "generate s",
                "generate M ev/s",
                "generator peak RSS MiB",
            ],
            gen_rows,
            ["--:"] * 7,
        )
    )
    report.append("")
    report.append("## convert and summary\n")
    report.append(
        f"Median of {args.repeat} run(s) per tool and N, interleaved (warm page cache: the run was "
        "just written). events/s = N recorded events / wall (`summary` `events` also counts the "
        "aggregated clock reads, checked = N + clock reads). Peak RSS of the mlprof process.\n"
    )
    report.append(
        md_table(
            [
                "tool",
                "N events",
                "runs",
                "wall s",
                "min – max",
                "CPU s",
                "M events/s",
                "peak RSS MiB",
                "trace MB",
            ],
            rows,
            ["---", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:"],
        )
    )
    report.append("")
    if len(plan) >= 2:
        lo, hi = min(plan), max(plan)
        growth = []
        for tool in tools:
            a, b = rss_by.get((tool, lo)), rss_by.get((tool, hi))
            if a and b:
                growth.append(
                    f"`{tool}`: {a / 2**20:.1f} → {b / 2**20:.1f} MiB for {hi / lo:.0f}× the events "
                    f"(×{b / a:.2f}; +{(b - a) / (hi - lo):.1f} B per extra event)"
                )
        if growth:
            report.append("Memory vs run length: " + "; ".join(growth) + ".\n")
    report.append(
        "Targets (issue 11): Perfetto ≥ 10 M events/s on one core, ≤ 100 MB for 10^8 events; "
        "memory not growing with run length.\n"
    )
    if notes:
        report.append("\n".join(f"- {n}" for n in notes) + "\n")
    report.append(f"loadavg at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    return common.finish_report(report, errors, args.out)


if __name__ == "__main__":
    sys.exit(main())

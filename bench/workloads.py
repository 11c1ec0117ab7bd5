#!/usr/bin/env python3
"""mlprof overhead on real PyTorch CPU training workloads (python3 standard library only; the
workloads themselves need the PyTorch venv).

Runs each workload of bench/workloads/ under each variant, interleaved round by round (the
variant order rotates each round):

    bare            python W.py DATA
    mlprof          mlprof-collect --quiet --out TMP/run.bin -- python W.py DATA
    mlprof_torch    mlprof-collect --torch --quiet --out TMP/run.bin -- python W.py DATA
    strace          strace -f -o TMP/strace.txt python W.py DATA
    torch_profiler  python W.py DATA --torch-profile TMP/trace.json

and reports, per workload and variant, the median wall time, the slowdown vs bare, the trace
size on disk and the number of events (and events/s). See bench/README.md.

    python3 bench/workloads.py [--rounds 3] [--workloads imgcls,transformer,io_heavy]
                               [--variants ...] [--scale 1.0] [--out FILE.md]
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import run as common  # noqa: E402  (bench/run.py: machine info, formatting, mlprof lookup)

WORKLOADS = {
    "imgcls": "image classification: ImageFolder of 1.5k JPEGs, DataLoader num_workers=2, "
    "torchvision transforms, small CNN, 150 steps of 32",
    "transformer": "TransformerEncoder fine-tune (2 layers, d=128) on random tokens, 200 steps of 16, "
    "torch.save checkpoint (model + AdamW state) every 50 steps",
    "io_heavy": "60k reads of 1-4 KiB files (open/read/close) + torch.save of a 200 MB tensor",
}
ALL_VARIANTS = ["bare", "mlprof", "mlprof_torch", "strace", "torch_profiler"]
DEFAULT_VENV_PY = os.path.expanduser(
    os.path.join(os.environ.get("MLPROF_VENV", "~/.cache/mlprof-venv"), "bin", "python")
)

log = common.log
md_table = common.md_table
BenchError = common.BenchError


def cpu_busy_s():
    """Seconds of CPU time all CPUs spent not idle (from /proc/stat), or None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def run_one(cmd, timeout, verbose):
    """Runs cmd (stdout captured); returns wall, tree CPU, background CPU and parsed key=values."""
    env = common.clean_env()
    line = common.cmdline(cmd)
    if verbose:
        log(f"  $ {line}")
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    b0 = cpu_busy_s()
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"timed out after {timeout}s: {line}") from None
    except OSError as e:
        raise BenchError(f"cannot run {line}: {e}") from e
    wall = time.monotonic() - t0
    b1 = cpu_busy_s()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    tree = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if p.returncode != 0:
        tail = "\n".join(p.stderr.strip().splitlines()[-8:])
        raise BenchError(f"exit status {p.returncode}: {line}\n{tail}")
    kv = common.parse_kv(p.stdout)
    if "loop_s" not in kv:
        raise BenchError(f"no loop_s= in output of: {line}\nstdout: {p.stdout[-500:]!r}")
    # CPU time the rest of the machine used meanwhile (other users' builds, ...), in cores.
    bg = None if b0 is None or b1 is None else max(0.0, (b1 - b0) - tree) / wall
    return {"wall": wall, "tree_cpu": tree, "bg_cores": bg, "kv": kv, "cmd": line}


def count_lines(path):
    n = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            n += block.count(b"\n")
    return n


def torch_trace_events(path):
    with open(path) as f:
        return len(json.load(f).get("traceEvents", []))


def torch_flag_supported(collect):
    try:
        p = subprocess.run(
            [collect, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--torch" in p.stdout


def torch_version(python):
    try:
        p = subprocess.run(
            [python, "-c", "import torch, torchvision; print(torch.__version__, torchvision.__version__)"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        return p.stdout.strip() if p.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def fmt_pct(ratio):
    if ratio is None:
        return "–"
    return f"{(ratio - 1) * 100:+.1f}%"


def fmt_mb(b):
    if b is None:
        return "–"
    return f"{b / 1e6:,.1f}" if b >= 1e5 else f"{b / 1e6:.3f}"


def fmt_int(x):
    return "–" if x is None else f"{x:,.0f}"


def main():
    ap = argparse.ArgumentParser(
        description="mlprof overhead on PyTorch CPU training workloads (see bench/README.md)"
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma list of: " + ",".join(WORKLOADS))
    ap.add_argument(
        "--variants", default=",".join(ALL_VARIANTS), help="comma list of: " + ",".join(ALL_VARIANTS)
    )
    ap.add_argument("--scale", type=float, default=1.0, help="passed to every workload: multiplies its work")
    ap.add_argument(
        "--python",
        default=DEFAULT_VENV_PY if os.path.exists(DEFAULT_VENV_PY) else sys.executable,
        help="interpreter with torch+torchvision (default ~/.cache/mlprof-venv/bin/python)",
    )
    ap.add_argument(
        "--data-dir",
        default=os.path.join(tempfile.gettempdir(), "mlprof-bench-data"),
        help="generated workload data, kept between runs (default /tmp/mlprof-bench-data)",
    )
    ap.add_argument("--out", help="also write the Markdown report to this file")
    ap.add_argument("--raw", help="also write every run's measurements to this JSON file")
    ap.add_argument(
        "--bin-dir", default=os.environ.get("MLPROF_BIN_DIR", os.path.join(REPO, "target", "release"))
    )
    ap.add_argument("--no-snapshot", action="store_true", help="use the mlprof binaries in place")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up run of each workload")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per command")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every command line as it runs")
    args = ap.parse_args()
    workloads = common.csv_list(args.workloads)
    variants = common.csv_list(args.variants)
    for w in workloads:
        if w not in WORKLOADS:
            ap.error(f"unknown workload {w!r}; choose from {','.join(WORKLOADS)}")
    for v in variants:
        if v not in ALL_VARIANTS:
            ap.error(f"unknown variant {v!r}; choose from {','.join(ALL_VARIANTS)}")
    if "bare" not in variants:
        variants.insert(0, "bare")
    if args.rounds < 1 or args.scale <= 0:
        ap.error("rounds must be >= 1 and scale > 0")

    la_start = os.getloadavg()
    report = ["# mlprof overhead on PyTorch CPU training workloads", ""]
    info = common.machine_info()
    tv = torch_version(args.python)
    info.append(("torch, torchvision", tv or "NOT IMPORTABLE"))
    report.append(
        md_table(
            ["machine", ""],
            [[k, v] for k, v in info] + [["command", common.cmdline([sys.executable] + sys.argv)]],
        )
    )
    report.append("")
    for k, v in info:
        log(f"{k}: {v}")
    if tv is None:
        log(f"ERROR: {args.python} cannot import torch and torchvision (run scripts/python-env.sh)")
        return 2

    skipped = {}
    ml, missing = common.locate_mlprof(args.bin_dir)
    snap = None
    if ml is None:
        for v in ("mlprof", "mlprof_torch"):
            skipped[v] = missing
    else:
        if not args.no_snapshot:
            snap = tempfile.mkdtemp(prefix="mlprof-bin-")
            ml = {
                k: (shutil.copy2(p, os.path.join(snap, os.path.basename(p))) if p else None)
                for k, p in ml.items()
            }
            report.append(f"(mlprof binaries copied to `{snap}` before the run; the copies are used.)\n")
        if not ml["cli"]:
            skipped.setdefault("mlprof", "no `mlprof` CLI binary (needed to count events)")
        if not torch_flag_supported(ml["collect"]):
            skipped["mlprof_torch"] = (
                "`mlprof-collect --help` does not list `--torch` (this build has no op spans)"
            )
    if not shutil.which("strace"):
        skipped["strace"] = "strace not installed"
    for v, why in skipped.items():
        if v in variants:
            log(f"NOTE: variant {v} skipped: {why}")
    variants = [v for v in variants if v not in skipped]

    scripts = {w: os.path.join(HERE, "workloads", f"{w}.py") for w in workloads}
    extra = [] if args.scale == 1.0 else ["--scale", str(args.scale)]
    tmp = tempfile.mkdtemp(prefix="mlprof-wl-")
    errors = []
    results = {}  # (w, v) -> list of sample dicts
    commands = {}
    try:
        log("== prepare data (untimed)")
        for w in workloads:
            t0 = time.monotonic()
            run = subprocess.run(
                [args.python, scripts[w], args.data_dir, "--prepare"],
                capture_output=True,
                text=True,
                timeout=args.timeout,
            )
            if run.returncode != 0:
                log(f"ERROR: preparing {w} failed:\n{run.stderr[-2000:]}")
                return 2
            log(f"   {w}: {time.monotonic() - t0:.1f} s")
            if not args.no_warmup:
                # Warms the page cache, .pyc files and the dataset cache; not measured.
                try:
                    run_one(
                        [args.python, scripts[w], args.data_dir, "--scale", str(0.05 * args.scale)],
                        args.timeout,
                        args.verbose,
                    )
                except BenchError as e:
                    log(f"ERROR: warm-up of {w} failed: {e}")
                    return 2

        for rnd in range(args.rounds):
            log(
                f"== round {rnd + 1}/{args.rounds}  (loadavg {' '.join(f'{x:.2f}' for x in os.getloadavg())})"
            )
            order = variants[rnd % len(variants) :] + variants[: rnd % len(variants)]
            for w in workloads:
                base = [args.python, scripts[w], args.data_dir] + extra
                for v in order:
                    out = None
                    if v == "bare":
                        cmd = base
                    elif v in ("mlprof", "mlprof_torch"):
                        out = os.path.join(tmp, "run.bin")
                        cmd = (
                            [ml["collect"]]
                            + (["--torch"] if v == "mlprof_torch" else [])
                            + ["--quiet", "--out", out, "--"]
                            + base
                        )
                    elif v == "strace":
                        out = os.path.join(tmp, "strace.txt")
                        cmd = ["strace", "-f", "-o", out] + base
                    else:
                        out = os.path.join(tmp, "trace.json")
                        cmd = base + ["--torch-profile", out]
                    if out and os.path.exists(out):
                        os.unlink(out)
                    try:
                        r = run_one(cmd, args.timeout, args.verbose)
                    except BenchError as e:
                        errors.append(f"round {rnd + 1} {w} {v}: {e}")
                        log(f"ERROR: {errors[-1]}")
                        continue
                    commands.setdefault(v, r["cmd"])
                    s = {
                        "wall": r["wall"],
                        "tree_cpu": r["tree_cpu"],
                        "bg": r["bg_cores"],
                        "loop": float(r["kv"]["loop_s"]),
                        "export": float(r["kv"].get("export_s", 0) or 0),
                        "size": None,
                        "events": None,
                        "dropped": None,
                    }
                    try:
                        if out:
                            s["size"] = os.path.getsize(out)
                        if v in ("mlprof", "mlprof_torch"):
                            summ, err = common.mlprof_summary(ml, out)
                            if summ is None:
                                raise BenchError(err)
                            s["events"] = int(summ.get("events", 0))
                            s["dropped"] = int(summ.get("dropped", 0))
                            if summ.get("truncated"):
                                errors.append(f"round {rnd + 1} {w} {v}: run.bin is truncated")
                        elif v == "strace":
                            s["events"] = count_lines(out)
                        elif v == "torch_profiler":
                            s["events"] = torch_trace_events(out)
                    except (OSError, ValueError, BenchError) as e:
                        errors.append(f"round {rnd + 1} {w} {v}: cannot read its trace: {e}")
                        log(f"ERROR: {errors[-1]}")
                    if out and os.path.exists(out):
                        os.unlink(out)
                    results.setdefault((w, v), []).append(s)
                    log(
                        f"   {w:12s} {v:15s} wall {s['wall']:7.2f} s  loop {s['loop']:7.2f} s  "
                        f"cpu {s['tree_cpu']:6.1f} s  bg {s['bg'] if s['bg'] is not None else float('nan'):.2f} cores"
                        + (f"  {s['size'] / 1e6:.1f} MB" if s["size"] is not None else "")
                        + (f"  {s['events']:,} events" if s["events"] is not None else "")
                    )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if snap:
            shutil.rmtree(snap, ignore_errors=True)

    def med(xs):
        xs = [x for x in xs if x is not None]
        return statistics.median(xs) if xs else None

    rows, bg_all = [], []
    for w in workloads:
        b = results.get((w, "bare"))
        bwall = med([s["wall"] for s in b]) if b else None
        bloop = med([s["loop"] for s in b]) if b else None
        bcpu = med([s["tree_cpu"] for s in b]) if b else None
        for v in ALL_VARIANTS:
            if v in skipped and v in common.csv_list(args.variants):
                rows.append([w, v, "0", "skipped"] + [""] * 10)
                continue
            xs = results.get((w, v))
            if v not in variants:
                continue
            if not xs:
                rows.append([w, v, "0", "FAILED"] + [""] * 10)
                continue
            bg_all += [s["bg"] for s in xs if s["bg"] is not None]
            wall = med([s["wall"] for s in xs])
            loop = med([s["loop"] for s in xs])
            walls = [s["wall"] for s in xs]
            ev = med([s["events"] for s in xs])
            evs = med([s["events"] / s["wall"] for s in xs if s["events"] is not None])
            drop = med([s["dropped"] for s in xs])
            rows.append(
                [
                    w,
                    v,
                    str(len(xs)),
                    f"{wall:.2f}",
                    f"{min(walls):.2f} – {max(walls):.2f}",
                    "" if v == "bare" or not bwall else f"{wall / bwall:.3f}× ({fmt_pct(wall / bwall)})",
                    f"{loop:.2f}",
                    "" if v == "bare" or not bloop else f"{loop / bloop:.3f}×",
                    f"{med([s['tree_cpu'] for s in xs]):.1f}",
                    "" if v == "bare" or not bcpu else f"{med([s['tree_cpu'] for s in xs]) / bcpu:.3f}×",
                    fmt_mb(med([s["size"] for s in xs])),
                    fmt_int(ev) + (f" ({fmt_int(drop)} dropped)" if drop else ""),
                    fmt_int(evs),
                    f"{med([s['bg'] for s in xs]):.2f}" if med([s["bg"] for s in xs]) is not None else "–",
                ]
            )
    report.append("## Workloads\n")
    report.append(
        "\n".join(
            f"- **{w}**: {WORKLOADS[w]}" + (f" (× {args.scale})" if args.scale != 1.0 else "")
            for w in workloads
        )
    )
    report.append(
        f"\nAll on CPU, torch intra-op threads = 1 (`--threads`), data in `{args.data_dir}` "
        f"(generated once, cached; one untimed warm-up run per workload).\n"
    )
    report.append("## Overhead\n")
    report.append(
        f"Median over {args.rounds} interleaved round(s). wall = the whole command (interpreter start, "
        "imports, the loop, profiler finalization); loop = the workload's own timing of its "
        "training loop (with torch.profiler it includes the trace export). CPU = user+sys of the "
        "command's whole process tree (less sensitive than wall to other work on the machine with one torch thread; "
        "it includes the collector's own CPU). bg = CPU used by the rest of the machine during the run, "
        "in cores (/proc/stat busy time minus our tree's CPU time, over wall).\n"
    )
    report.append(
        md_table(
            [
                "workload",
                "variant",
                "runs",
                "wall s (median)",
                "min – max",
                "wall × bare",
                "loop s",
                "loop × bare",
                "CPU s",
                "CPU × bare",
                "trace MB",
                "events",
                "events/s",
                "bg cores",
            ],
            rows,
            ["---", "---"] + ["--:"] * 12,
        )
    )
    report.append("")
    notes = [
        "trace = `run.bin` (mlprof), the `strace -f -o FILE` output (strace), the exported Chrome JSON "
        "(torch.profiler). events = `mlprof summary --json` `events` (recorded calls + aggregated clock "
        "reads), strace output lines (≈ syscalls, plus signal/exit lines), torch.profiler `traceEvents` "
        "entries. events/s = events / wall of the same run.",
        "torch.profiler sees only the main process (not the DataLoader workers) and only torch ops; "
        "strace and mlprof see the whole process tree. strace records syscalls, mlprof libc calls "
        "(clock reads aggregated by default).",
        "The target of issue 6 is ≤ 1% median wall slowdown for the default `mlprof` variant.",
    ]
    for v, why in skipped.items():
        notes.append(f"**{v} skipped**: {why}.")
    report.append("\n".join(f"- {n}" for n in notes))
    report.append("")
    report.append("### Commands (first round, one per variant)\n")
    report.append("```\n" + "\n".join(f"{v:15s} {c}" for v, c in commands.items()) + "\n```\n")
    la_end = os.getloadavg()
    report.append(
        f"loadavg at start: {' '.join(f'{x:.2f}' for x in la_start)}; at end: "
        f"{' '.join(f'{x:.2f}' for x in la_end)}; background CPU during the runs: median "
        f"{statistics.median(bg_all) if bg_all else float('nan'):.2f} cores, max "
        f"{max(bg_all) if bg_all else float('nan'):.2f} (of {os.cpu_count()}).\n"
    )
    ncpu = os.cpu_count() or 1
    if bg_all and statistics.median(bg_all) > 0.25 * ncpu:
        report.append(
            f"**Warning: the machine was busy** (other work used a median "
            f"{statistics.median(bg_all):.2f} of {ncpu} cores during the runs): differences of a "
            f"few percent are within the noise; rerun on a quiet machine.\n"
        )
    if args.raw:
        with open(args.raw, "w") as f:
            json.dump(
                [{"workload": w, "variant": v, "runs": xs} for (w, v), xs in results.items()], f, indent=1
            )
    return common.finish_report(report, errors, args.out)


if __name__ == "__main__":
    sys.exit(main())

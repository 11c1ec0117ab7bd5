#!/usr/bin/env python3
"""mlprof overhead on real PyTorch CPU training workloads (python3 standard library only; the
workloads themselves need the PyTorch venv).

Runs each workload of bench/workloads/ under each variant, interleaved round by round (the
variant order rotates each round, so every variant has a bare run beside it: a pair):

    bare            python W.py DATA
    mlprof          mlprof-collect --quiet --out TMP/run.bin -- python W.py DATA
    mlprof_torch    mlprof-collect --torch --quiet --out TMP/run.bin -- python W.py DATA
    strace          strace -f -o TMP/strace.txt python W.py DATA
    torch_profiler  python W.py DATA --torch-profile TMP/trace.json
    mlprof_base, mlprof_torch_base   the same as mlprof(_torch) with the binaries of
                    --base-bin-dir (an older build: before/after in the same run)

and reports, per workload and variant, the median over pairs of the wall-time and CPU-time
ratios to bare with bootstrap 95 % confidence intervals, the trace size on disk and the number
of events. `--perf` adds a `perf record -e cpu-clock` breakdown of where the added CPU goes.
See bench/README.md.

    python3 bench/workloads.py [--pairs 15] [--workloads imgcls,transformer:cores,io_heavy]
                               [--variants ...] [--scale 1.0] [--perf] [--out FILE.md]
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
import perf_breakdown  # noqa: E402
import run as common  # noqa: E402  (bench/run.py: machine info, formatting, mlprof lookup)
import stats  # noqa: E402

WORKLOADS = {
    "imgcls": "image classification: ImageFolder of 1.5k JPEGs, DataLoader num_workers=2, "
    "torchvision transforms, small CNN, 150 steps of 32",
    "transformer": "TransformerEncoder fine-tune (2 layers, d=128) on random tokens, 200 steps of 16, "
    "torch.save checkpoint (model + AdamW state) every 50 steps",
    "io_heavy": "60k reads of 1-4 KiB files (open/read/close) + torch.save of a 200 MB tensor",
}
ALL_VARIANTS = [
    "bare",
    "mlprof",
    "mlprof_torch",
    "strace",
    "torch_profiler",
    "mlprof_base",
    "mlprof_torch_base",
]
MLPROF_VARIANTS = ("mlprof", "mlprof_torch", "mlprof_base", "mlprof_torch_base")
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


def parse_configs(spec, ap):
    """'imgcls,transformer:cores,io_heavy:2' -> [(label, workload, threads)]."""
    out = []
    for item in common.csv_list(spec):
        w, _, t = item.partition(":")
        if w not in WORKLOADS:
            ap.error(f"unknown workload {w!r}; choose from {','.join(WORKLOADS)}")
        if t in ("", "1"):
            threads = 1
        elif t == "cores":
            threads = os.cpu_count() or 1
        else:
            try:
                threads = int(t)
            except ValueError:
                ap.error(f"bad thread count in {item!r}: use W, W:N or W:cores")
            if threads < 1:
                ap.error(f"bad thread count in {item!r}")
        label = w if threads == 1 else f"{w} ({threads} threads)"
        out.append((label, w, threads))
    return out


def snapshot(bin_dir, label, report):
    """Locates the mlprof binaries of bin_dir and copies them to a temp dir, so that a rebuild
    during the run cannot mix versions. Returns (binaries or None, why missing, temp dir)."""
    ml, missing = common.locate_mlprof(bin_dir)
    if ml is None:
        return None, missing, None
    snap = tempfile.mkdtemp(prefix=f"mlprof-bin-{label}-")
    ml = {k: (shutil.copy2(p, os.path.join(snap, os.path.basename(p))) if p else None) for k, p in ml.items()}
    commit = common.open_or(os.path.join(bin_dir, "COMMIT"))
    report.append(
        f"({label} binaries from `{bin_dir}`"
        + (f", built from {commit}" if commit != "?" else "")
        + f", copied to `{snap}` before the run; the copies are used.)\n"
    )
    return ml, None, snap


def variant_cmd(v, base, bins, tmp):
    """(command, output file or None) of variant v around the workload command `base`."""
    if v == "bare":
        return base, None
    if v in MLPROF_VARIANTS:
        out = os.path.join(tmp, "run.bin")
        ml = bins[v]
        return [ml["collect"]] + (["--torch"] if "torch" in v else []) + [
            "--quiet",
            "--out",
            out,
            "--",
        ] + base, out
    if v == "strace":
        out = os.path.join(tmp, "strace.txt")
        return ["strace", "-f", "-o", out] + base, out
    out = os.path.join(tmp, "trace.json")
    return base + ["--torch-profile", out], out


def measure(v, cmd, out, bins, timeout, verbose):
    """Runs one variant once; returns its sample dict (raises BenchError)."""
    if out and os.path.exists(out):
        os.unlink(out)
    r = run_one(cmd, timeout, verbose)
    s = {
        "wall": r["wall"],
        "tree_cpu": r["tree_cpu"],
        "bg": r["bg_cores"],
        "loop": float(r["kv"]["loop_s"]),
        "size": None,
        "events": None,
        "dropped": None,
        "cmd": r["cmd"],
    }
    try:
        if out:
            s["size"] = os.path.getsize(out)
        if v in MLPROF_VARIANTS:
            summ, err = common.mlprof_summary(bins[v], out)
            if summ is None:
                raise BenchError(err)
            s["events"] = int(summ.get("events", 0))
            s["dropped"] = int(summ.get("dropped", 0))
            if summ.get("truncated"):
                raise BenchError("run.bin is truncated")
        elif v == "strace":
            s["events"] = count_lines(out)
        elif v == "torch_profiler":
            s["events"] = torch_trace_events(out)
    except (OSError, ValueError) as e:
        raise BenchError(f"cannot read its trace: {e}") from e
    finally:
        if out and os.path.exists(out):
            os.unlink(out)
    return s


def perf_section(configs, variants, scripts, args, extra, bins, tmp, errors):
    """One perf-recorded run per config and variant (bare and the mlprof ones): CPU seconds per
    category, and what each mlprof variant adds over bare."""
    why = perf_breakdown.available()
    if why:
        return [f"## Where the added CPU goes\n\nskipped: {why}\n"]
    pv = [v for v in variants if v == "bare" or v in MLPROF_VARIANTS]
    lines = [
        "## Where the added CPU goes (`perf record -e cpu-clock`)\n",
        "One run per workload and variant under `perf record -e cpu-clock -F 999` (children "
        "followed), classified by `bench/perf_breakdown.py`: CPU seconds per category, and in "
        "brackets the difference to bare's run. Sampled at 1 ms, so a category below ~0.05 s is "
        "noise; the perf runs are separate from the timed pairs above. Python-level hooks of "
        "`--torch` appear in `job user` (Python 3.11 has no perf trampolines).\n",
    ]
    for label, w, threads in configs:
        base = [args.python, scripts[w], args.data_dir, "--threads", str(threads)] + extra
        got = {}
        for v in pv:
            cmd, out = variant_cmd(v, base, bins, tmp)
            data = os.path.join(tmp, "perf.data")
            try:
                log(f"   perf {label} {v}")
                run_one(perf_breakdown.record_cmd(cmd, data), args.timeout, args.verbose)
                got[v] = perf_breakdown.classify(data)
            except (BenchError, RuntimeError) as e:
                errors.append(f"perf {label} {v}: {e}")
                log(f"ERROR: {errors[-1]}")
            finally:
                for f in (data, out):
                    if f and os.path.exists(f):
                        os.unlink(f)
        if "bare" not in got:
            continue
        cats = [c for c in perf_breakdown.CATEGORY_ORDER if any(c in got[v][0] for v in got)]
        rows = []
        for c in cats + ["total"]:
            b = got["bare"][2] if c == "total" else got["bare"][0].get(c, 0.0)
            row = [c, f"{b:.2f}"]
            for v in pv[1:]:
                if v not in got:
                    row.append("–")
                    continue
                x = got[v][2] if c == "total" else got[v][0].get(c, 0.0)
                row.append(f"{x:.2f} ({x - b:+.2f})")
            rows.append(row)
        lines.append(f"### {label}\n")
        lines.append(md_table(["category (CPU s)", "bare"] + pv[1:], rows, ["---"] + ["--:"] * len(pv)))
        lines.append("")
        for v in pv[1:]:
            if v in got and got[v][1]:
                top = ", ".join(f"`{k}` {t:.3f}" for k, t in got[v][1].items())
                lines.append(f"- {v}: top libmlprof.so symbols (s): {top}")
        lines.append("")
    return lines


def main():
    ap = argparse.ArgumentParser(
        description="mlprof overhead on PyTorch CPU training workloads (see bench/README.md)"
    )
    ap.add_argument(
        "--pairs",
        "--rounds",
        dest="pairs",
        type=int,
        default=15,
        help="interleaved rounds; each gives every variant one pair with bare (default 15)",
    )
    ap.add_argument(
        "--workloads",
        default="imgcls,transformer,transformer:cores,io_heavy",
        help="comma list of W or W:THREADS (torch intra-op threads; 'cores' = all CPUs, the "
        "CPU-saturated case) with W one of: " + ",".join(WORKLOADS),
    )
    ap.add_argument(
        "--variants",
        default="bare,mlprof,mlprof_torch,strace,torch_profiler",
        help="comma list of: " + ",".join(ALL_VARIANTS),
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
    ap.add_argument(
        "--base-bin-dir",
        help="an older build (mlprof-collect, libmlprof.so, mlprof) for the *_base variants; "
        "a COMMIT file there is quoted in the report",
    )
    ap.add_argument("--perf", action="store_true", help="add the perf record -e cpu-clock breakdown")
    ap.add_argument("--target", type=float, default=1.01, help="slowdown target for the verdicts (1.01)")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up run of each workload")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per command")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every command line as it runs")
    args = ap.parse_args()
    configs = parse_configs(args.workloads, ap)
    variants = common.csv_list(args.variants)
    for v in variants:
        if v not in ALL_VARIANTS:
            ap.error(f"unknown variant {v!r}; choose from {','.join(ALL_VARIANTS)}")
    if "bare" not in variants:
        variants.insert(0, "bare")
    if any(v.endswith("_base") for v in variants) and not args.base_bin_dir:
        ap.error("the *_base variants need --base-bin-dir")
    if args.base_bin_dir:
        for v in ("mlprof_base", "mlprof_torch_base"):
            if v.replace("_base", "") in variants and v not in variants:
                variants.append(v)
    if args.pairs < 1 or args.scale <= 0:
        ap.error("pairs must be >= 1 and scale > 0")

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

    skipped, snaps, bins = {}, [], {}
    for label, bin_dir, vs in (
        ("current", args.bin_dir, ("mlprof", "mlprof_torch")),
        ("base", args.base_bin_dir, ("mlprof_base", "mlprof_torch_base")),
    ):
        if bin_dir is None or not any(v in variants for v in vs):
            continue
        ml, missing, snap = snapshot(bin_dir, label, report)
        if snap:
            snaps.append(snap)
        for v in vs:
            if ml is None:
                skipped[v] = missing
            elif not ml["cli"]:
                skipped[v] = "no `mlprof` CLI binary (needed to count events)"
            elif "torch" in v and not torch_flag_supported(ml["collect"]):
                skipped[v] = "`mlprof-collect --help` does not list `--torch` (this build has no op spans)"
            else:
                bins[v] = ml
    if not shutil.which("strace"):
        skipped["strace"] = "strace not installed"
    for v, why in skipped.items():
        if v in variants:
            log(f"NOTE: variant {v} skipped: {why}")
    requested = list(variants)
    variants = [v for v in variants if v not in skipped]

    scripts = {w: os.path.join(HERE, "workloads", f"{w}.py") for w in WORKLOADS}
    extra = [] if args.scale == 1.0 else ["--scale", str(args.scale)]
    tmp = tempfile.mkdtemp(prefix="mlprof-wl-")
    errors = []
    results = {}  # (label, v) -> {round: sample}
    commands = {}
    perf_lines = []
    try:
        log("== prepare data (untimed)")
        for w in sorted({w for _, w, _ in configs}):
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

        for rnd in range(args.pairs):
            log(f"== round {rnd + 1}/{args.pairs}  (loadavg {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
            order = variants[rnd % len(variants) :] + variants[: rnd % len(variants)]
            for label, w, threads in configs:
                base = [args.python, scripts[w], args.data_dir, "--threads", str(threads)] + extra
                for v in order:
                    cmd, out = variant_cmd(v, base, bins, tmp)
                    try:
                        s = measure(v, cmd, out, bins, args.timeout, args.verbose)
                    except BenchError as e:
                        errors.append(f"round {rnd + 1} {label} {v}: {e}")
                        log(f"ERROR: {errors[-1]}")
                        continue
                    commands.setdefault(v, s["cmd"])
                    results.setdefault((label, v), {})[rnd] = s
                    log(
                        f"   {label:24s} {v:17s} wall {s['wall']:7.2f} s  loop {s['loop']:7.2f} s  "
                        f"cpu {s['tree_cpu']:6.1f} s  bg {s['bg'] if s['bg'] is not None else float('nan'):.2f} cores"
                        + (f"  {s['size'] / 1e6:.1f} MB" if s["size"] is not None else "")
                        + (f"  {s['events']:,} events" if s["events"] is not None else "")
                        + (f" ({s['dropped']:,} dropped)" if s["dropped"] else "")
                    )
        if args.perf:
            log("== perf record -e cpu-clock breakdown")
            perf_lines = perf_section(configs, variants, scripts, args, extra, bins, tmp, errors)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        for snap in snaps:
            shutil.rmtree(snap, ignore_errors=True)

    report += overhead_section(configs, requested, variants, skipped, results, args)
    report += perf_lines
    report.append("### Commands (first round, one per variant)\n")
    report.append("```\n" + "\n".join(f"{v:17s} {c}" for v, c in commands.items()) + "\n```\n")
    bg_all = [s["bg"] for xs in results.values() for s in xs.values() if s["bg"] is not None]
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
                [
                    {"workload": label, "variant": v, "runs": [dict(s, round=r) for r, s in xs.items()]}
                    for (label, v), xs in results.items()
                ],
                f,
                indent=1,
            )
    return common.finish_report(report, errors, args.out)


def overhead_section(configs, requested, variants, skipped, results, args):
    def med(xs):
        xs = [x for x in xs if x is not None]
        return statistics.median(xs) if xs else None

    rows = []
    for label, _, _ in configs:
        b = results.get((label, "bare"), {})
        for v in requested:
            if v in skipped:
                rows.append([label, v, "0", "skipped"] + [""] * 9)
                continue
            xs = results.get((label, v))
            if not xs:
                rows.append([label, v, "0", "FAILED"] + [""] * 9)
                continue
            walls = [s["wall"] for s in xs.values()]
            cpu = med([s["tree_cpu"] for s in xs.values()])
            ev = med([s["events"] for s in xs.values()])
            drop = sum(s["dropped"] or 0 for s in xs.values())
            row = [label, v, str(len(xs)), f"{med(walls):.2f} ({min(walls):.2f} – {max(walls):.2f})"]
            if v == "bare":
                row += ["", "", "", "", f"{cpu:.1f}", ""]
            else:
                wr = stats.median_ci(stats.paired(xs, b, "wall"))
                cr = stats.median_ci(stats.paired(xs, b, "tree_cpu"))
                ca = stats.median_ci(stats.paired(xs, b, "tree_cpu", op="diff"))
                lr = stats.median_ci(stats.paired(xs, b, "loop"))
                row += [
                    stats.fmt_ratio_ci(*wr),
                    stats.verdict(wr[1], wr[2], args.target) if v in MLPROF_VARIANTS else "",
                    stats.fmt_ratio_ci(*lr),
                    stats.fmt_ratio_ci(*cr),
                    f"{cpu:.1f}",
                    "–"
                    if ca[0] is None
                    else f"{ca[0]:+.2f}" + ("" if ca[1] is None else f" [{ca[1]:+.2f}, {ca[2]:+.2f}]"),
                ]
            row += [
                fmt_mb(med([s["size"] for s in xs.values()])),
                fmt_int(ev) + (f" ({fmt_int(drop)} dropped in all)" if drop else ""),
                f"{med([s['bg'] for s in xs.values()]):.2f}"
                if med([s["bg"] for s in xs.values()]) is not None
                else "–",
            ]
            rows.append(row)
    lines = ["## Workloads\n"]
    lines.append(
        "\n".join(
            f"- **{w}**: {WORKLOADS[w]}" + (f" (× {args.scale})" if args.scale != 1.0 else "")
            for w in sorted({w for _, w, _ in configs})
        )
    )
    lines.append(
        f"\nAll on CPU; torch intra-op threads 1 unless the row says otherwise (`W:cores` is the "
        f"CPU-saturated case: every core runs an intra-op thread); data in `{args.data_dir}` "
        "(generated once, cached; one untimed warm-up run per workload).\n"
    )
    lines.append("## Overhead\n")
    lines.append(
        f"{args.pairs} interleaved rounds; in each, every variant runs once next to one bare run "
        "(a pair), the order rotating each round. Ratios are the **median over pairs** of "
        "variant / bare of the same round, shown as a change in % with a **bootstrap 95 % "
        "confidence interval** over the pairs in brackets. wall = the whole command; loop = the "
        "workload's own timing of its training loop; CPU = user+sys of the command's whole "
        "process tree (collector included); added CPU = the per-pair difference in CPU seconds. "
        f"The verdict compares the wall interval with the {((args.target - 1) * 100):.0f} % target. "
        "bg = CPU used by the rest of the machine during the run, in cores.\n"
    )
    lines.append(
        md_table(
            [
                "workload",
                "variant",
                "pairs",
                "wall s median (min – max)",
                "wall vs bare [95 % CI]",
                "verdict",
                "loop vs bare",
                "CPU vs bare",
                "CPU s",
                "added CPU s [95 % CI]",
                "trace MB",
                "events",
                "bg cores",
            ],
            rows,
            ["---", "---"] + ["--:"] * 11,
        )
    )
    lines.append("")
    notes = [
        "trace = `run.bin` (mlprof), the `strace -f -o FILE` output (strace), the exported Chrome JSON "
        "(torch.profiler). events = `mlprof summary --json` `events` (recorded calls + aggregated clock "
        "reads), strace output lines (≈ syscalls), torch.profiler `traceEvents` entries.",
        "torch.profiler sees only the main process (not the DataLoader workers) and only torch ops; "
        "strace and mlprof see the whole process tree.",
        "An interval that contains the target does not say the target is met or missed: it says "
        "that this many pairs on this machine cannot tell.",
    ]
    for v, why in skipped.items():
        if v in requested:
            notes.append(f"**{v} skipped**: {why}.")
    lines.append("\n".join(f"- {n}" for n in notes))
    lines.append("")
    return lines


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""mlprof overhead benchmark harness (python3 standard library only).

Latency mode (default): for each OP x THREADS, round after round, runs the
variants interleaved
    bare    calls OP N T
    shim    LD_PRELOAD=libshim.so calls OP N T          (counting interposer floor)
    mlprof  mlprof-collect --quiet --out TMP.bin -- calls OP N T
    strace  strace -f -qq -o /dev/null calls OP N_small T
and reports the median ns/call of each variant, the ns added vs bare and the
ratio vs bare.

Throughput mode (--throughput): write_null with --tp-threads threads at
increasing N under mlprof-collect; reports recorded events/s, dropped
records, collector CPU time and bytes per event.

    python3 bench/run.py [--rounds 5] [--n 2000000] [--ops read,clock_gettime,open_close,ioctl,cuda]
                         [--threads 1,2] [--out FILE.md] [--throughput]

See bench/README.md.
"""

import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from stats import median_ci  # noqa: E402

ALL_OPS = ["read", "write_null", "clock_gettime", "open_close", "ioctl", "cuda", "stat"]
ALL_VARIANTS = ["bare", "shim", "mlprof", "strace", "mlprof_base"]
DEFAULT_VARIANTS = ["bare", "shim", "mlprof", "strace"]
# libc functions each OP calls in its loop (per iteration), as named in
# `mlprof summary --json` "calls".
OP_FUNCS = {
    "read": ["read"],
    "write_null": ["write"],
    "clock_gettime": ["clock_gettime"],
    "open_close": ["open", "close"],
    "ioctl": ["ioctl"],
    "cuda": ["cudaStreamQuery"],
    "stat": ["stat"],
}
# Ops the counting shim does not intercept (its row then measures the bare call).
SHIM_BLIND = {"cuda", "stat"}


class BenchError(Exception):
    pass


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def cmdline(cmd, env_extra=None):
    pre = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env_extra or {}).items())
    s = " ".join(shlex.quote(c) for c in cmd)
    return f"{pre} {s}" if pre else s


def clean_env():
    env = dict(os.environ)
    for k in list(env):
        if k == "LD_PRELOAD" or k.startswith("MLPROF_") or k == "SHIM_REPORT":
            del env[k]
    return env


def parse_kv(text):
    out = {}
    for line in text.splitlines():
        if "=" in line:
            k, _, v = line.partition("=")
            k = k.strip()
            if k and " " not in k:
                out[k] = v.strip()
    return out


def run_cmd(cmd, env_extra=None, timeout=900, echo=True, need_ns=True):
    """Runs cmd; returns dict(kv=..., stderr=..., wall_s=..., tree_cpu_s=...).

    tree_cpu_s is user+sys of the process tree (the direct child and every
    descendant it reaped), from RUSAGE_CHILDREN deltas: the harness runs one
    command at a time, so the delta is exactly this command's tree.
    """
    env = clean_env()
    env.update(env_extra or {})
    line = cmdline(cmd, env_extra)
    if echo:
        log(f"  $ {line}")
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"timed out after {timeout}s: {line}") from None
    except OSError as e:
        raise BenchError(f"cannot run {line}: {e}") from e
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    tree_cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if p.returncode != 0:
        tail = "\n".join(p.stderr.strip().splitlines()[-8:])
        raise BenchError(f"exit status {p.returncode}: {line}\n{tail}")
    kv = parse_kv(p.stdout)
    if need_ns and "ns_per_call" not in kv:
        raise BenchError(f"no ns_per_call= in output of: {line}\nstdout: {p.stdout[-500:]!r}")
    return {
        "kv": kv,
        "stdout": p.stdout,
        "stderr": p.stderr,
        "wall_s": wall,
        "tree_cpu_s": tree_cpu,
        "cmd": line,
    }


# ---------------------------------------------------------------- machine info


def read_first(path, key):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def tool_version(cmd):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=20)
        return p.stdout.strip().splitlines()[0] if p.stdout.strip() else "?"
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def machine_info():
    try:
        avail = len(os.sched_getaffinity(0))
    except AttributeError:
        avail = os.cpu_count()
    u = platform.uname()
    info = [
        ("date", datetime.datetime.now().astimezone().isoformat(timespec="seconds")),
        ("nproc", f"{avail} usable ({os.cpu_count()} online)"),
        ("cpu", read_first("/proc/cpuinfo", "model name")),
        ("cpu MHz", read_first("/proc/cpuinfo", "cpu MHz")),
        ("memory", read_first("/proc/meminfo", "MemTotal")),
        ("kernel", f"{u.system} {u.release} {u.version} {u.machine}"),
        ("clocksource", open_or("/sys/devices/system/clocksource/clocksource0/current_clocksource")),
        ("loadavg at start", " ".join(f"{x:.2f}" for x in os.getloadavg())),
        ("gcc", tool_version(["gcc", "--version"])),
        ("strace", tool_version(["strace", "-V"]) if shutil.which("strace") else "not installed"),
        ("python", sys.version.split()[0]),
        ("git", git_rev()),
    ]
    return info


def open_or(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "?"


def git_rev():
    try:
        p = subprocess.run(
            ["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            timeout=10,
        )
        rev = p.stdout.strip() or "no commit"
        d = subprocess.run(
            ["git", "-C", REPO, "status", "--porcelain"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            timeout=10,
        )
        return rev + (" (dirty tree)" if d.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return "?"


# ---------------------------------------------------------------- build / locate


def build(build_dir):
    os.makedirs(build_dir, exist_ok=True)
    calls = os.path.join(build_dir, "calls")
    shim = os.path.join(build_dir, "libshim.so")
    cmds = [
        [
            "gcc",
            "-O2",
            "-Wall",
            "-U_FORTIFY_SOURCE",
            "-pthread",
            "-o",
            calls,
            os.path.join(HERE, "calls.c"),
            "-ldl",
        ],
        [
            "gcc",
            "-O2",
            "-Wall",
            "-shared",
            "-fPIC",
            "-pthread",
            "-o",
            shim,
            os.path.join(HERE, "shim.c"),
            "-ldl",
        ],
    ]
    for c in cmds:
        log(f"  $ {cmdline(c)}")
        p = subprocess.run(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            raise BenchError(f"build failed ({p.returncode}): {cmdline(c)}\n{p.stdout}")
    return calls, shim, [cmdline(c) for c in cmds]


def locate_mlprof(bin_dir):
    collect = os.path.join(bin_dir, "mlprof-collect")
    lib = os.path.join(bin_dir, "libmlprof.so")
    cli = os.path.join(bin_dir, "mlprof")
    missing = [p for p in (collect, lib) if not os.path.exists(p)]
    if missing:
        return None, "missing " + ", ".join(missing) + " (run `cargo build --release`)"
    return {"collect": collect, "lib": lib, "cli": cli if os.path.exists(cli) else None}, None


def strace_usable(calls):
    if not shutil.which("strace"):
        return "strace not installed"
    try:
        run_cmd(["strace", "-f", "-qq", "-o", "/dev/null", calls, "read", "10", "1"], echo=False, timeout=60)
    except BenchError as e:
        return f"strace does not work here: {e}"
    return None


def mlprof_summary(ml, binfile):
    if not ml["cli"]:
        return None, "no mlprof CLI binary"
    cmd = [ml["cli"], "summary", "--json", binfile]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return None, f"`{cmdline(cmd)}` exit {p.returncode}: {p.stderr.strip()[-300:]}"
    try:
        return json.loads(p.stdout), None
    except ValueError as e:
        return None, f"`{cmdline(cmd)}` printed invalid JSON: {e}"


# ---------------------------------------------------------------- formatting


def fmt_ns(x):
    if x is None:
        return "–"
    if abs(x) >= 10000:
        return f"{x / 1000:,.0f} µs" if abs(x) >= 1e6 else f"{x / 1000:,.1f} µs"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.1f}"


def fmt_ratio(x):
    if x is None:
        return "–"
    return f"{x:,.0f}×" if x >= 100 else f"{x:.2f}×"


def md_table(header, rows, align=None):
    align = align or ["---"] * len(header)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


# ---------------------------------------------------------------- latency mode


def latency(args, calls, shim, ml, strace_off, report):
    ops = args.ops
    threads = args.threads
    variants = [v for v in args.variants]
    skipped = {}
    if "mlprof" in variants and ml is None:
        skipped["mlprof"] = args.mlprof_missing
    if "strace" in variants and strace_off:
        skipped["strace"] = strace_off
    for v, why in skipped.items():
        log(f"NOTE: variant '{v}' skipped: {why}")
        variants.remove(v)
    n_strace = args.strace_n or max(2000, args.n // 1000)

    tmpdir = tempfile.mkdtemp(prefix="mlprof-bench-")
    results = {}  # (op, T, variant) -> list of ns
    errors = []
    checks = []
    commands = {}  # variant -> example command
    try:
        # Sanity: the shim really intercepts (one small run per op, untimed).
        if "shim" in variants:
            for op in ops:
                if op in SHIM_BLIND:
                    continue
                n = 1000
                r = run_cmd([calls, op, str(n), "1"], {"LD_PRELOAD": shim, "SHIM_REPORT": "1"}, echo=False)
                got = parse_kv(r["stderr"].replace("shim: ", "")).get("calls")
                want = (n + max(1, n // 10)) * len(OP_FUNCS[op])
                ok = got is not None and int(got) >= want
                checks.append(("shim", op, 1, f"intercepted {got} calls (≥ {want} expected)", ok))
                if not ok:
                    errors.append(f"shim check failed for {op}: calls={got}, expected ≥ {want}")

        for rnd in range(args.rounds):
            log(f"== round {rnd + 1}/{args.rounds}")
            # rotate the variant order each round so no variant always runs
            # right after the same other one
            order = variants[rnd % len(variants) :] + variants[: rnd % len(variants)]
            for op in ops:
                for t in threads:
                    for v in order:
                        n = n_strace if v == "strace" else args.n
                        binfile = os.path.join(tmpdir, f"{op}-{t}.bin")
                        env = None
                        if v == "bare":
                            cmd = [calls, op, str(n), str(t)]
                        elif v == "shim":
                            cmd = [calls, op, str(n), str(t)]
                            env = {"LD_PRELOAD": shim}
                        elif v in ("mlprof", "mlprof_base"):
                            bins = ml if v == "mlprof" else args.ml_base
                            cmd = [
                                bins["collect"],
                                "--quiet",
                                "--out",
                                binfile,
                                "--",
                                calls,
                                op,
                                str(n),
                                str(t),
                            ]
                        else:
                            cmd = ["strace", "-f", "-qq", "-o", "/dev/null", calls, op, str(n), str(t)]
                        try:
                            r = run_cmd(cmd, env, timeout=args.timeout, echo=args.verbose)
                        except BenchError as e:
                            errors.append(f"round {rnd + 1} {op} T={t} {v}: {e}")
                            log(f"ERROR: {errors[-1]}")
                            continue
                        commands.setdefault(v, r["cmd"])
                        ns = float(r["kv"]["ns_per_call"])
                        results.setdefault((op, t, v), []).append(ns)
                        if v == "mlprof" and rnd == 0 and ml["cli"]:
                            checks.append(mlprof_check(ml, binfile, op, n, t))
                            if not checks[-1][4]:
                                errors.append(f"mlprof check failed for {op} T={t}: {checks[-1][3]}")
                        if v.startswith("mlprof") and os.path.exists(binfile):
                            os.unlink(binfile)
                    log(
                        f"   {op} T={t}: "
                        + "  ".join(
                            f"{v}={results[(op, t, v)][-1]:.1f}" for v in variants if (op, t, v) in results
                        )
                    )
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)

    rows = []
    for op in ops:
        for t in threads:
            base = results.get((op, t, "bare"))
            bmed = statistics.median(base) if base else None
            for v in ALL_VARIANTS:
                if v in skipped:
                    rows.append([op, t, v, "–", "skipped", "", "", "", "", ""])
                    continue
                xs = results.get((op, t, v))
                if v not in variants:
                    continue
                if not xs:
                    rows.append([op, t, v, "–", "FAILED", "", "", "", "", "0"])
                    continue
                med = statistics.median(xs)
                n = n_strace if v == "strace" else args.n
                add = None if bmed is None or v == "bare" else med - bmed
                add_min = None if bmed is None or v == "bare" else min(xs) - min(base)
                ratio = None if bmed is None or v == "bare" else med / bmed
                rows.append(
                    [
                        op,
                        t,
                        v,
                        f"{n:,}",
                        fmt_ns(med),
                        f"{fmt_ns(min(xs))} – {fmt_ns(max(xs))}",
                        ""
                        if v == "bare"
                        else (("+" if add >= 0 else "") + fmt_ns(add) if add is not None else "–"),
                        ""
                        if v == "bare"
                        else (
                            ("+" if add_min >= 0 else "") + fmt_ns(add_min) if add_min is not None else "–"
                        ),
                        "" if v == "bare" else fmt_ratio(ratio),
                        str(len(xs)),
                    ]
                )
    report.append("## Per-call overhead\n")
    report.append(
        f"Median over {args.rounds} interleaved rounds; ns per call per thread "
        f"(loop wall time / N, mean over threads). Values ≥ 10 µs shown in µs.\n"
    )
    report.append(
        md_table(
            [
                "op",
                "threads",
                "variant",
                "N/thread",
                "median ns/call",
                "min – max",
                "added vs bare (median)",
                "added (min vs min)",
                "× bare (median)",
                "runs",
            ],
            rows,
            ["---", "--:", "---", "--:", "--:", "--:", "--:", "--:", "--:", "--:"],
        )
    )
    report.append("")
    notes = [
        "Variant order rotates each round. Noise on a shared VM only adds time, so the "
        "min-vs-min column is the less noisy estimate of the added cost; the median is the typical one."
    ]
    if "open_close" in ops:
        notes.append("`open_close` is one open + one close per iteration (two intercepted calls).")
    if "strace" in variants:
        notes.append(
            f"strace runs N={n_strace:,} per thread (it costs ~100 µs per traced syscall); "
            "it cannot see vDSO `clock_gettime`, so its clock_gettime row is ~bare."
        )
    for v, why in skipped.items():
        notes.append(f"**{v} skipped**: {why}.")
    report.append("\n".join(f"- {n}" for n in notes))
    report.append("")
    if checks:
        report.append("### Checks\n")
        report.append(
            md_table(
                ["variant", "op", "threads", "result", "ok"],
                [[c[0], c[1], c[2], c[3], "yes" if c[4] else "**NO**"] for c in checks],
            )
        )
        report.append("")
    report.append("### Commands (first round, one per variant)\n")
    report.append("```\n" + "\n".join(f"{v:7s} {c}" for v, c in commands.items()) + "\n```\n")
    return errors


def mlprof_check(ml, binfile, op, n, t):
    """Untimed: did mlprof record the calls of this run?"""
    if not os.path.exists(binfile):
        return ("mlprof", op, t, f"no output file {binfile}", False)
    s, err = mlprof_summary(ml, binfile)
    if s is None:
        return ("mlprof", op, t, err, False)
    warm = min(max(1, n // 10), 100000)  # calls.c warm-up
    want = (n + warm) * t
    parts, ok = [], True
    for fn in OP_FUNCS[op]:
        c = (s.get("calls", {}).get(fn) or {}).get("count", 0)
        parts.append(f"{fn}={c:,}")
        # dropped records are allowed (they are reported), missing ones are not
        if c + s.get("dropped", 0) < want:
            ok = False
    parts.append(f"events={s.get('events', '?'):,}" if isinstance(s.get("events"), int) else "events=?")
    parts.append(f"dropped={s.get('dropped', '?')}")
    if s.get("truncated"):
        parts.append("TRUNCATED")
        ok = False
    return ("mlprof", op, t, ", ".join(parts) + f" (≥ {want:,} per function expected)", ok)


# ---------------------------------------------------------------- throughput mode


def throughput(args, calls, ml, report):
    errors = []
    report.append("## Collector throughput (write_null)\n")
    if ml is None:
        msg = f"skipped: {args.mlprof_missing}"
        log(f"NOTE: throughput mode {msg}")
        report.append(f"_{msg}_\n")
        return errors
    t = args.tp_threads
    tmpdir = tempfile.mkdtemp(prefix="mlprof-tp-")
    rows = []
    cmds = []
    # Per N: the dropped share of every run (the table shows the run of median ns/call).
    drop_lines = []
    try:
        for n in args.tp_n:
            log(f"== throughput N={n} T={t}")
            binfile = os.path.join(tmpdir, "run.bin")
            samples = []
            for rnd in range(args.tp_rounds):
                try:
                    b = run_cmd(
                        [calls, "write_null", str(n), str(t)], timeout=args.timeout, echo=args.verbose
                    )
                    if os.path.exists(binfile):
                        os.unlink(binfile)
                    cmd = [
                        ml["collect"],
                        "--quiet",
                        "--out",
                        binfile,
                        "--",
                        calls,
                        "write_null",
                        str(n),
                        str(t),
                    ]
                    r = run_cmd(cmd, timeout=args.timeout, echo=args.verbose)
                except BenchError as e:
                    errors.append(f"throughput N={n}: {e}")
                    log(f"ERROR: {errors[-1]}")
                    continue
                if rnd == 0:
                    cmds.append(r["cmd"])
                size = os.path.getsize(binfile) if os.path.exists(binfile) else 0
                s, err = mlprof_summary(ml, binfile)
                if s is None:
                    errors.append(f"throughput N={n}: {err}")
                    log(f"ERROR: {errors[-1]}")
                    continue
                kv = r["kv"]
                app_cpu = float(kv.get("cpu_s", "nan"))
                samples.append(
                    {
                        "bare_ns": float(b["kv"]["ns_per_call"]),
                        "ml_ns": float(kv["ns_per_call"]),
                        "app_wall": float(kv.get("wall_s", "nan")),
                        "total_wall": r["wall_s"],
                        "events": int(s.get("events", 0)),
                        "writes": int((s.get("calls", {}).get("write") or {}).get("count", 0)),
                        "dropped": int(s.get("dropped", 0)),
                        "truncated": bool(s.get("truncated", False)),
                        "coll_cpu": r["tree_cpu_s"] - app_cpu,
                        "app_cpu": app_cpu,
                        "size": size,
                    }
                )
                if os.path.exists(binfile):
                    os.unlink(binfile)
            if not samples:
                rows.append([f"{n:,}", t, "FAILED"] + [""] * 10)
                continue
            shares = [100.0 * x["dropped"] / max(1, x["events"] + x["dropped"]) for x in samples]
            med, lo, hi = median_ci(shares)
            interval = f" [{lo:.2f}, {hi:.2f}] (95 % bootstrap CI)" if lo is not None else ""
            drop_lines.append(
                f"- N={n:,}: dropped % per run: {', '.join(f'{v:.2f}' for v in shares)}; "
                f"median {med:.2f} %{interval}"
            )
            # median sample by collector ns/call
            samples.sort(key=lambda x: x["ml_ns"])
            m = samples[len(samples) // 2]
            calls_total = n * t
            offered = calls_total / m["app_wall"] if m["app_wall"] > 0 else float("nan")
            drop_pct = 100.0 * m["dropped"] / max(1, m["events"] + m["dropped"])
            rec_s = offered * (1.0 - drop_pct / 100.0)
            rows.append(
                [
                    f"{n:,}",
                    t,
                    f"{calls_total:,}",
                    f"{m['bare_ns']:.0f} / {m['ml_ns']:.0f}",
                    f"{m['app_wall']:.3f} / {m['total_wall']:.3f}",
                    f"{offered / 1e6:.2f}",
                    f"{rec_s / 1e6:.2f}",
                    f"{m['events']:,}",
                    f"{m['dropped']:,} ({drop_pct:.2f}%)" + (" TRUNC" if m["truncated"] else ""),
                    f"{m['coll_cpu']:.3f}",
                    f"{1e9 * m['coll_cpu'] / m['events']:.0f}" if m["events"] else "–",
                    f"{m['size'] / 1e6:.1f}",
                    f"{m['size'] / m['events']:.1f}" if m["events"] else "–",
                ]
            )
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    report.append(
        f"{t} threads each doing N 1-byte writes to /dev/null under mlprof-collect "
        f"(median of {args.tp_rounds} run(s) per N).\n"
    )
    report.append(
        md_table(
            [
                "N/thread",
                "threads",
                "calls",
                "ns/call bare / mlprof",
                "app loop s / collector run s",
                "offered Mcalls/s",
                "recorded Mev/s",
                "events",
                "dropped",
                "collector CPU s",
                "collector CPU ns/event",
                "run.bin MB",
                "bytes/event",
            ],
            rows,
            ["--:"] * 13,
        )
    )
    report.append("")
    report.extend(drop_lines)
    report.append("")
    report.append(
        "- offered = N×threads / app loop wall time; recorded = offered × (1 − dropped/(events+dropped)).\n"
        "- collector CPU = user+sys of the mlprof-collect process tree (RUSAGE_CHILDREN delta) "
        "minus the application's own getrusage(RUSAGE_SELF) (`cpu_s=` printed by calls); "
        "the in-process cost of libmlprof is in the application's time, not here.\n"
        "- bytes/event = size of run.bin / events (events include a few setup calls).\n"
    )
    if cmds:
        report.append("```\n" + "\n".join(cmds) + "\n```\n")
    return errors


# ---------------------------------------------------------------- main


def find_cudart():
    """The CUDA runtime from the NVIDIA wheels in the test Python environment, if any."""
    venv = os.environ.get("MLPROF_VENV", os.path.expanduser("~/.cache/mlprof-venv"))
    for root, _dirs, files in os.walk(os.path.join(venv, "lib")):
        for name in ("libcudart.so.13", "libcudart.so.12"):
            if name in files:
                return os.path.join(root, name)
    return None


def finish_report(report, errors, out):
    """Appends the errors, prints the Markdown report, writes it to `out` if given; returns the
    exit status (1 when anything failed). Shared by the harnesses in bench/."""
    if errors:
        report.append("## Errors\n")
        report.append("\n".join(f"- {e}".replace("\n", "\n  ") for e in errors) + "\n")
    text = "\n".join(report)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)
        log(f"report written to {out}")
    return 1 if errors else 0


def csv_list(s, cast=str):
    return [cast(x.strip()) for x in s.split(",") if x.strip()]


def main():
    ap = argparse.ArgumentParser(description="mlprof overhead benchmark (see bench/README.md)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=2000000, help="calls per thread (bare, shim, mlprof)")
    ap.add_argument(
        "--strace-n", type=int, default=0, help="calls per thread under strace (default max(2000, N/1000))"
    )
    ap.add_argument(
        "--ops", default="read,clock_gettime,open_close,ioctl", help="comma list of: " + ",".join(ALL_OPS)
    )
    ap.add_argument("--threads", default="1,2", help="comma list of thread counts")
    ap.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help="comma list of: " + ",".join(ALL_VARIANTS) + " (mlprof_base needs --base-bin-dir)",
    )
    ap.add_argument(
        "--base-bin-dir",
        help="an older build, run as the mlprof_base variant in the same rounds (before/after); "
        "added to --variants when given",
    )
    ap.add_argument("--out", help="also write the Markdown report to this file")
    ap.add_argument("--throughput", action="store_true", help="run the collector throughput mode too")
    ap.add_argument("--throughput-only", action="store_true", help="run only the throughput mode")
    ap.add_argument("--tp-n", default="100000,1000000,3000000", help="N per thread for --throughput")
    ap.add_argument("--tp-threads", type=int, default=2)
    ap.add_argument("--tp-rounds", type=int, default=3)
    ap.add_argument(
        "--bin-dir",
        default=os.environ.get("MLPROF_BIN_DIR", os.path.join(REPO, "target", "release")),
        help="directory with mlprof-collect, libmlprof.so, mlprof (default target/release)",
    )
    ap.add_argument(
        "--no-snapshot",
        action="store_true",
        help="use the mlprof binaries in place instead of copying them first",
    )
    ap.add_argument("--build-dir", default=os.path.join(HERE, "build"))
    ap.add_argument("--timeout", type=int, default=900, help="seconds per command")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every command line as it runs")
    args = ap.parse_args()

    args.ops = csv_list(args.ops)
    args.threads = csv_list(args.threads, int)
    args.variants = csv_list(args.variants)
    args.tp_n = csv_list(args.tp_n, int)
    for o in args.ops:
        if o not in ALL_OPS:
            ap.error(f"unknown op {o!r}; choose from {','.join(ALL_OPS)}")
    if "cuda" in args.ops and not os.environ.get("CALLS_CUDART"):
        found = find_cudart()
        if found:
            os.environ["CALLS_CUDART"] = found
        else:
            log("op cuda skipped: no libcudart.so.12/13 found (set CALLS_CUDART)")
            args.ops.remove("cuda")
    for v in args.variants:
        if v not in ALL_VARIANTS:
            ap.error(f"unknown variant {v!r}; choose from {','.join(ALL_VARIANTS)}")
    if "bare" not in args.variants:
        args.variants.insert(0, "bare")
    if args.base_bin_dir and "mlprof_base" not in args.variants:
        args.variants.append("mlprof_base")
    if "mlprof_base" in args.variants and not args.base_bin_dir:
        ap.error("the mlprof_base variant needs --base-bin-dir")
    if args.rounds < 1 or args.n < 1 or any(t < 1 for t in args.threads) or args.tp_rounds < 1:
        ap.error("rounds, n, threads and tp-rounds must be >= 1")

    la_start = os.getloadavg()
    report = ["# mlprof overhead benchmark", ""]
    info = machine_info()
    report.append(
        md_table(
            ["machine", ""], [[k, v] for k, v in info] + [["command", cmdline([sys.executable] + sys.argv)]]
        )
    )
    report.append("")
    for k, v in info:
        log(f"{k}: {v}")

    log("== build")
    try:
        calls, shim, build_cmds = build(args.build_dir)
    except BenchError as e:
        log(f"ERROR: {e}")
        return 2
    ml, args.mlprof_missing = locate_mlprof(args.bin_dir)
    if ml and not args.no_snapshot:
        # Copy the binaries so that a rebuild during the run cannot mix versions
        # (mlprof-collect finds libmlprof.so next to itself).
        snap = tempfile.mkdtemp(prefix="mlprof-bin-")
        snap_ml = {}
        for k in ("collect", "lib", "cli"):
            if ml[k]:
                snap_ml[k] = shutil.copy2(ml[k], os.path.join(snap, os.path.basename(ml[k])))
            else:
                snap_ml[k] = None
        report.append(f"(mlprof binaries copied to `{snap}` before the run; the copies are used.)\n")
    else:
        snap, snap_ml = None, ml
    if ml:
        log(f"mlprof: {ml['collect']}")

        def stamp(p):
            st = os.stat(p)
            t = datetime.datetime.fromtimestamp(st.st_mtime).astimezone().isoformat(timespec="seconds")
            return f"`{p}` ({st.st_size:,} B, built {t})"

        report.append(
            "mlprof binaries: "
            + ", ".join(stamp(p) for p in (ml["collect"], ml["lib"], ml["cli"]) if p)
            + ("" if ml["cli"] else " (no `mlprof` CLI: no summary checks)")
            + "\n"
        )
    else:
        log(f"NOTE: mlprof variant skipped: {args.mlprof_missing}")
    report.append("Build:\n```\n" + "\n".join(build_cmds) + "\n```\n")
    strace_off = strace_usable(calls) if "strace" in args.variants else None

    errors = []
    ml = snap_ml
    args.ml_base, base_snap = None, None
    if args.base_bin_dir:
        base, why = locate_mlprof(args.base_bin_dir)
        if base is None:
            log(f"ERROR: --base-bin-dir: {why}")
            return 2
        base_snap = tempfile.mkdtemp(prefix="mlprof-bin-base-")
        args.ml_base = {
            k: (shutil.copy2(p, os.path.join(base_snap, os.path.basename(p))) if p else None)
            for k, p in base.items()
        }
        commit = open_or(os.path.join(args.base_bin_dir, "COMMIT"))
        report.append(f"mlprof_base binaries: `{args.base_bin_dir}` ({commit}), copied to `{base_snap}`.\n")
    try:
        if not args.throughput_only:
            errors += latency(args, calls, shim, ml, strace_off, report)
        if args.throughput or args.throughput_only:
            errors += throughput(args, calls, ml, report)
    finally:
        if snap:
            shutil.rmtree(snap, ignore_errors=True)
        if base_snap:
            shutil.rmtree(base_snap, ignore_errors=True)

    la_end = os.getloadavg()
    report.append(f"loadavg at end: {' '.join(f'{x:.2f}' for x in la_end)}\n")
    ncpu = os.cpu_count() or 1
    # (the end load includes the benchmark's own threads, so only the start load is judged)
    if la_start[0] > 0.5 * ncpu:
        w = (
            f"**Warning: the machine was busy at start** (1-min load {la_start[0]:.2f}, {ncpu} CPUs); "
            f"other work may have competed with the benchmark: rerun on a quiet machine.\n"
        )
        report.append(w)
        log(w.strip())
    return finish_report(report, errors, args.out)


if __name__ == "__main__":
    sys.exit(main())

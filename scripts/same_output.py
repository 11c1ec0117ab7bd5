#!/usr/bin/env python3
"""Do two builds of `mlprof` say the same thing about the same runs? (python3 standard library,
plus DuckDB from the test environment for the Parquet row hashes)

A refactoring of the readers must leave every output byte for byte as it was (issue 34). This
records a set of runs once, with one build's collector, then has both builds' `mlprof` read
them and compares what each wrote: summary (tables, JSON, --syscalls), energy (tables, JSON,
--ops, CSV), convert (Perfetto protobuf, Chrome JSON, a time window, a process, some kinds,
parts), export (every Parquet file byte for byte, and DuckDB's hash of every table's rows),
report (HTML), diff, and merge (the merged run file, then its summary).

    python3 scripts/same_output.py record DIR [--bin-dir target/release] [--synth-events 10000000]
    python3 scripts/same_output.py compare DIR --base OLD_BIN_DIR --new target/release

`record` needs gcc, the Python environment with PyTorch (scripts/python-env.sh) and a build
with the `synth_run` example (`cargo build --release -p mlprof-format --example synth_run`).
`compare` prints one line per output (`same` or `DIFFERENT` with the first differing byte)
and exits 1 if any differs. Outputs that name a temporary path or the time of the report are
compared after those are replaced by placeholders (said in the line).
"""

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs"


def sh(cmd, env=None, cwd=None, check=True, stdout=None):
    merged = dict(os.environ)
    merged.update(env or {})
    shown = " ".join(str(c) for c in cmd)
    print(f"  $ {shown}", file=sys.stderr)
    return subprocess.run(
        [str(c) for c in cmd], env=merged, cwd=cwd, check=check, stdout=stdout, stderr=subprocess.PIPE
    )


def python_env():
    out = subprocess.run(
        [str(ROOT / "scripts" / "python-env.sh")], check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


def gcc(out, *args):
    sh(["gcc", "-O1", "-pthread", "-U_FORTIFY_SOURCE", "-o", out, *args])


def record(args):
    runs = pathlib.Path(args.dir).resolve()
    build = runs / "build"
    work = runs / "work"
    build.mkdir(parents=True, exist_ok=True)
    work.mkdir(exist_ok=True)
    bins = pathlib.Path(args.bin_dir).resolve()
    collect = bins / "mlprof-collect"
    python = python_env()
    # The NVML double stands in for the GPU's energy counter (no GPU here); an empty powercap
    # folder keeps the host's RAPL out, so that the energy tables are the double's alone.
    no_powercap = work / "no-powercap"
    no_powercap.mkdir(exist_ok=True)
    nvml = build / "libnvml_double.so"
    sh(["gcc", "-shared", "-fPIC", "-O1", "-o", nvml, ROOT / "tests/nvml_double/nvml_double.c", "-lm"])
    for name in [
        "fileops",
        "threads_fork",
        "energy_phases",
        "metadata",
        "stdio",
        "spawn",
        "fdchurn",
        "trapped",
    ]:
        gcc(build / name, PROGRAMS / f"{name}.c")
    libcuda = build / "libcuda.so.1"
    sh(["gcc", "-O1", "-shared", "-fPIC", "-o", libcuda, ROOT / "tests/doubles/libcuda_double.c"])
    sh(["gcc", "-O1", "-o", build / "cuda_driver", PROGRAMS / "cuda_driver.c", "-ldl"])

    def run(name, cmd, opts=(), env=None):
        out = runs / f"{name}.bin"
        sh([collect, "--quiet", "--out", out, *opts, "--", *cmd], env=env)

    energy_env = {
        "NVML_DOUBLE_START_NS": str(time.clock_gettime_ns(time.CLOCK_MONOTONIC)),
        "NVML_DOUBLE_GPUS": "2",
        "MLPROF_POWERCAP_DIR": str(no_powercap),
    }
    run("fileops", [build / "fileops", work, 100])
    run("threads_fork", [build / "threads_fork", work, 4, 500])
    run("metadata", [build / "metadata", work, 200])
    run("stdio", [build / "stdio", work, 500])
    run("spawn", [build / "spawn", "posix_spawn", work, 11, 17])
    run("fdchurn", [build / "fdchurn", work, 3, 200, 4])
    run("trapped", [build / "trapped", "window", 20], opts=["--all-syscalls"])
    run("energy", [build / "energy_phases"], opts=["--nvml-lib", nvml], env=energy_env)
    run("cuda_driver", [build / "cuda_driver", 25], env={"LD_LIBRARY_PATH": str(build)})
    data = work / "images"
    run(
        "torch",
        [python, ROOT / "examples/train.py", "--data", data, "--out", work / "ckpt.pt", "--epochs", 2],
        opts=["--torch", "--nvml-lib", nvml],
        env=energy_env,
    )
    run("torch_plain", [python, ROOT / "examples/train.py", "--data", data, "--out", work / "ckpt.pt"])
    synth = bins / "synth_run"
    if not synth.exists():
        synth = ROOT / "target/release/examples/synth_run"
    sh([synth, runs / "synth.bin", args.synth_events])
    sh([synth, runs / "synth_small.bin", 300000, "--seed", 7, "--open-every", 40])
    for node in range(2):
        sh(
            [
                synth,
                runs / f"node{node}.bin",
                200000,
                "--node",
                node,
                "--nodes",
                2,
                "--ranks",
                4,
                "--procs",
                4,
            ]
        )
    shutil.rmtree(work, ignore_errors=True)
    print(f"runs in {runs}", file=sys.stderr)


# What each build is asked, per run: (name of the output, arguments; {run}, {out} replaced).
PER_RUN = [
    ("summary.txt", ["summary", "{run}"]),
    ("summary.json", ["summary", "--json", "{run}"]),
    ("syscalls.txt", ["summary", "--syscalls", "{run}"]),
    ("syscalls.json", ["summary", "--syscalls", "--json", "{run}"]),
    ("energy.txt", ["energy", "{run}"]),
    ("energy.json", ["energy", "--json", "{run}"]),
    ("energy_ops.txt", ["energy", "--ops", "{run}"]),
    ("energy_ops.csv", ["energy", "--ops", "--csv", "{run}"]),
    ("trace.pftrace", ["convert", "-o", "{out}", "{run}"]),
    ("trace.json", ["convert", "--format", "chrome", "-o", "{out}", "{run}"]),
    ("io.pftrace", ["convert", "--only", "io", "-o", "{out}", "{run}"]),
    ("window.json", ["convert", "--from", "0.05", "--to", "0.4", "-o", "{out}", "{run}"]),
    ("report.html", ["report", "-o", "{out}", "{run}"]),
]
# Only for the small runs (a browser-sized trace in parts).
SMALL_ONLY = [
    ("parts", ["convert", "--split-every", "2000", "-o", "{out}/part.pftrace", "{run}"]),
]
BIG = {"synth"}


def normalize(data: bytes, run_dir: str) -> bytes:
    """Temporary folders and report times out of text outputs."""
    data = data.replace(run_dir.encode(), b"<RUNS>")
    data = re.sub(rb"/tmp/same-output-[a-z]+-\w+", b"<OUT>", data)
    data = re.sub(rb"generated \d{4}-\d\d-\d\d[ T][\d:]+( UTC)?", b"generated <TIME>", data)
    # How long an export took (its summary line).
    data = re.sub(rb", [\d.]+ s\)", b", <TIME> s)", data)
    return data


def outputs(binary, runs, out_dir, names, pairs, merges):
    """Runs every command of `binary` into out_dir; returns {output name: path}."""
    made = {}
    for run in names:
        run_path = runs / f"{run}.bin"
        commands = PER_RUN + ([] if run in BIG else SMALL_ONLY)
        for name, template in commands:
            target = out_dir / f"{run}.{name}"
            if name == "parts":
                target.mkdir(parents=True, exist_ok=True)
            argv = [a.replace("{run}", str(run_path)).replace("{out}", str(target)) for a in template]
            result = subprocess.run([binary, *argv], capture_output=True)
            if not any("{out}" in a for a in template):
                target.write_bytes(result.stdout)
            (out_dir / f"{run}.{name}.status").write_bytes(
                f"exit {result.returncode}\n".encode() + normalize(result.stderr, str(runs))
            )
            made[f"{run}.{name}"] = target
        export = out_dir / f"{run}.parquet"
        result = subprocess.run([binary, "export", "--parquet", export, run_path], capture_output=True)
        (out_dir / f"{run}.export.status").write_bytes(
            f"exit {result.returncode}\n".encode() + normalize(result.stdout + result.stderr, str(runs))
        )
        made[f"{run}.parquet"] = export
    for a, b in pairs:
        for name, extra in [("diff.txt", []), ("diff.json", ["--json"])]:
            result = subprocess.run(
                [binary, "diff", *extra, runs / f"{a}.bin", runs / f"{b}.bin"], capture_output=True
            )
            target = out_dir / f"{a}-{b}.{name}"
            target.write_bytes(normalize(result.stdout, str(runs)) + f"exit {result.returncode}\n".encode())
            made[target.name] = target
        target = out_dir / f"{a}-{b}.report.html"
        subprocess.run(
            [binary, "report", "--baseline", runs / f"{a}.bin", "-o", target, runs / f"{b}.bin"],
            capture_output=True,
        )
        made[target.name] = target
    for name, parts in merges:
        merged = out_dir / f"{name}.bin"
        result = subprocess.run(
            [binary, "merge", "-o", merged, *(runs / f"{p}.bin" for p in parts)], capture_output=True
        )
        (out_dir / f"{name}.merge.txt").write_bytes(normalize(result.stdout + result.stderr, str(runs)))
        made[f"{name}.merge.txt"] = out_dir / f"{name}.merge.txt"
        made[f"{name}.bin"] = merged
        summary = out_dir / f"{name}.summary.json"
        summary.write_bytes(subprocess.run([binary, "summary", "--json", merged], capture_output=True).stdout)
        trace = out_dir / f"{name}.trace.pftrace"
        subprocess.run([binary, "convert", "-o", trace, merged], capture_output=True)
        made[summary.name], made[trace.name] = summary, trace
    return made


def first_difference(a: bytes, b: bytes):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else None


def files_under(path: pathlib.Path):
    """`path` itself when it is no folder (a file, or missing), else every file below it."""
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file())


def duckdb_hashes(python, export_dir: pathlib.Path):
    """Per table: DuckDB's row count and the sum of its rows' hashes (order-free)."""
    script = r"""
import sys, duckdb, pathlib
root = pathlib.Path(sys.argv[1])
con = duckdb.connect()
for table in sorted(p.name for p in root.iterdir() if p.is_dir()):
    rel = con.read_parquet(str(root / table / "**" / "*.parquet"), hive_partitioning=True)
    cols = ", ".join('"' + c + '"' for c in rel.columns)
    q = f"select count(*), sum(hash({cols}))::hugeint from read_parquet('{root / table}/**/*.parquet', hive_partitioning=true)"
    n, h = con.execute(q).fetchone()
    print(table, n, h)
"""
    out = subprocess.run([python, "-c", script, export_dir], capture_output=True, text=True)
    return out.stdout + out.stderr


def compare(args):
    runs = pathlib.Path(args.dir).resolve()
    names = (
        args.runs.split(",")
        if args.runs
        else sorted(p.stem for p in runs.glob("*.bin") if not p.stem.startswith("node"))
    )
    pairs = [("torch_plain", "torch"), ("fileops", "threads_fork"), ("synth_small", "synth")]
    pairs = [(a, b) for a, b in pairs if a in names and b in names]
    merges = [("merged", ["node0", "node1"])] if (runs / "node0.bin").exists() else []
    python = python_env()
    base_out = pathlib.Path(f"/tmp/same-output-base-{os.getpid()}")
    new_out = pathlib.Path(f"/tmp/same-output-new-{os.getpid()}")
    for d in (base_out, new_out):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
    made = {}
    for label, bin_dir, out in [("base", args.base, base_out), ("new", args.new, new_out)]:
        print(f"{label}: {bin_dir}", file=sys.stderr)
        made[label] = outputs(pathlib.Path(bin_dir).resolve() / "mlprof", runs, out, names, pairs, merges)
    differences = 0
    for key in sorted(made["base"]):
        a, b = made["base"][key], made["new"][key]
        for fa in files_under(a):
            whole = fa == a
            fb = b if whole else b / fa.relative_to(a)
            label = key if whole else f"{key}/{fa.relative_to(a)}"
            if not fb.exists() or not fa.exists():
                print(f"DIFFERENT {label}: missing in {'new' if fa.exists() else 'base'}")
                differences += 1
                continue
            da, db = fa.read_bytes(), fb.read_bytes()
            if whole and key.endswith((".txt", ".json", ".html", ".csv")):
                da, db = normalize(da, str(base_out)), normalize(db, str(new_out))
            at = first_difference(da, db)
            if at is None:
                print(f"same      {label} ({len(da)} bytes)")
            else:
                differences += 1
                print(f"DIFFERENT {label}: first at byte {at} ({len(da)} vs {len(db)} bytes)")
        if key.endswith(".parquet") and a.exists():
            ha, hb = duckdb_hashes(python, a), duckdb_hashes(python, b)
            if ha == hb:
                print(f"same      {key} DuckDB row hashes: {' | '.join(ha.strip().splitlines())}")
            else:
                differences += 1
                print(f"DIFFERENT {key} DuckDB row hashes:\n  base {ha}\n  new  {hb}")
    status_diffs = 0
    for f in sorted(base_out.glob("*.status")):
        g = new_out / f.name
        if not g.exists() or normalize(f.read_bytes(), str(base_out)) != normalize(
            g.read_bytes(), str(new_out)
        ):
            status_diffs += 1
            print(f"DIFFERENT {f.name} (exit status or messages)")
    if not args.keep:
        for d in (base_out, new_out):
            shutil.rmtree(d, ignore_errors=True)
    else:
        print(f"outputs kept in {base_out} and {new_out}", file=sys.stderr)
    total = differences + status_diffs
    print(f"{'all outputs the same' if total == 0 else f'{total} outputs differ'}")
    return 1 if total else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record", help="record the runs with one build")
    r.add_argument("dir")
    r.add_argument("--bin-dir", default=str(ROOT / "target" / "release"))
    r.add_argument("--synth-events", type=int, default=10_000_000)
    c = sub.add_parser("compare", help="have two builds read the runs and compare their outputs")
    c.add_argument("dir")
    c.add_argument("--base", required=True, help="folder with the old build's mlprof")
    c.add_argument("--new", default=str(ROOT / "target" / "release"))
    c.add_argument("--runs", help="comma-separated run names (default: every run in DIR)")
    c.add_argument("--keep", action="store_true", help="keep the outputs under /tmp")
    args = parser.parse_args()
    if args.command == "record":
        record(args)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())

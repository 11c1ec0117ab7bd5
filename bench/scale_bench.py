"""The synthetic multi-node benchmark of BENCHMARKS.md ("Ranks, merge, export"): writes the
run.bin of every node of a ranked job with the `synth_run` example (node i's clock 1000·i s
ahead, its realtime anchor off by 700·(i-1) ms, the same pids on every node), then times
`mlprof merge` and `mlprof export --parquet` and reads their peak memory (ru_maxrss).

    python3 bench/scale_bench.py [--nodes 4] [--ranks 16] [--events-per-node 2.5M] [--keep DIR]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """Runs cmd; returns (seconds, its peak RSS in MB, its stderr)."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as err:
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - start
        err.seek(0)
        said = err.read().decode()
    if child.returncode != 0:
        raise SystemExit(f"{cmd} failed: {said}")
    return seconds, usage.ru_maxrss / 1024, said


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--ranks", type=int, default=16, help="ranks per node")
    ap.add_argument("--events-per-node", default="2.5M")
    ap.add_argument("--keep", help="write the files here and keep them")
    args = ap.parse_args()
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "mlprof-format", "--example", "synth_run"],
        cwd=REPO,
        check=True,
    )
    synth = os.path.join(REPO, "target", "release", "examples", "synth_run")
    mlprof = os.path.join(REPO, "target", "release", "mlprof")
    work = args.keep or tempfile.mkdtemp(prefix="mlprof-scale-")
    os.makedirs(work, exist_ok=True)
    try:
        nodes = []
        for i in range(args.nodes):
            path = os.path.join(work, f"node{i}.bin")
            cmd = [synth, path, args.events_per_node, "--threads", "2"]
            cmd += ["--node", str(i), "--nodes", str(args.nodes), "--ranks", str(args.ranks)]
            subprocess.run(cmd, check=True, capture_output=True)
            nodes.append(path)
        size = sum(os.path.getsize(p) for p in nodes)
        job = os.path.join(work, "job.bin")
        merge_s, merge_mb, said = timed([mlprof, "merge", *nodes, "-o", job])
        events = int(said.rsplit("wrote ", 1)[1].split()[0])
        out = os.path.join(work, "parquet")
        shutil.rmtree(out, ignore_errors=True)
        export_s, export_mb, said = timed([mlprof, "export", "--parquet", out, job])
        parquet = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)
        summary_s, summary_mb, _ = timed([mlprof, "summary", "--json", job])
        print(f"{args.nodes} nodes x {args.ranks} ranks, {events} events, run files {size / 1e6:.0f} MB")
        print(
            f"merge:   {merge_s:.2f} s, {events / merge_s / 1e6:.2f} M events/s, peak RSS {merge_mb:.0f} MB"
        )
        print(
            f"export:  {export_s:.2f} s, {events / export_s / 1e6:.2f} M events/s, peak RSS {export_mb:.0f} MB, "
            f"Parquet {parquet / 1e6:.1f} MB ({parquet / events:.1f} bytes/event, all tables)"
        )
        print(f"summary: {summary_s:.2f} s (for comparison), peak RSS {summary_mb:.0f} MB")
        print(said.strip())
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

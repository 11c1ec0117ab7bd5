#!/usr/bin/env python3
"""mlprof's overhead on a real CUDA training job, and what it records there (needs an NVIDIA GPU).

A ResNet-18 trains on synthetic 64×64 images (batch 128, SGD, a DataLoader with 2 workers and
pinned memory; tests/gpu/resnet_job.py, run as its own process) for --steps timed steps after 20
warm-up steps. Each round runs it bare and as each of
--variants (`torch`: `mlprof-collect --torch`, energy sampling on; `plain`: the collector without
--torch; `torch-noenergy`; `torch-noops`: --torch with MLPROF_TORCH_OPS=0; `emit_itt`: PyTorch's
own ITT path with no collector; `plain-itt`: the same under the collector; `plain-itt-early`: under
the collector, op ranges from the script's start, workers included), in rotated order
(bench/run.py's run_cmd); reported per variant against bare in the same round: the timed
steps' wall time (CUDA-synchronized), the whole process's wall time and the CPU time of its
tree (DataLoader workers and collector included), as medians of the per-pair ratios with 95 %
bootstrap intervals (bench/stats.py). The last profiled run's summary, energy report and trace
conversion are printed; each profiled variant's last run file is copied to --keep.

    tests/gpu/torch_cuda_overhead.py [--bin-dir target/release] [--python PY] [--rounds N]
                                     [--steps N] [--variants torch,plain,...] [--keep DIR]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import run as common  # bench/run.py: run_cmd
import stats


def timed(cmd, env_extra):
    """One run: its timed steps, wall and tree CPU, and stderr; None (said) if it failed."""
    try:
        r = common.run_cmd(cmd, env_extra, echo=False, need_ns=False)
    except common.BenchError as e:
        print(f"FAILED: {e}")
        return None
    kv = r["kv"]
    return {
        "steps_s": float(kv["steps_s"]),
        "steps": int(kv["steps"]),
        "wall_s": r["wall_s"],
        "cpu_s": r["tree_cpu_s"],
        "stderr": r["stderr"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument(
        "--bin-dir",
        default=os.environ.get("MLPROF_BIN_DIR", os.path.join(here, "..", "..", "target", "release")),
    )
    ap.add_argument("--python", default=os.environ.get("PYTHON", sys.executable))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--keep", default=None, help="copy the last profiled run.bin here")
    ap.add_argument(
        "--variants",
        default="torch",
        help="against bare, comma-separated: torch, plain, torch-noenergy, torch-noops, emit_itt, plain-itt, plain-itt-early",
    )
    args = ap.parse_args()
    bins = os.path.abspath(args.bin_dir)
    tmp = tempfile.mkdtemp(prefix="mlprof-gpu-overhead-")
    bare_cmd = [args.python, os.path.join(here, "resnet_job.py"), str(args.steps)]

    def collect(name):
        return [os.path.join(bins, "mlprof-collect"), "--out", os.path.join(tmp, f"run_{name}.bin")]

    # Each variant against bare in the same round. emit_itt: PyTorch's own ITT path with no
    # collector (what --torch turns on; mlprof cannot shorten it).
    variants = {
        "torch": (collect("torch") + ["--torch", "--"] + bare_cmd, {}),
        "plain": (collect("plain") + ["--"] + bare_cmd, {}),
        "torch-noenergy": (collect("torch-noenergy") + ["--torch", "--no-energy", "--"] + bare_cmd, {}),
        # --torch without PyTorch's op ranges (phases and DataLoader spans only, in every process)
        "torch-noops": (collect("torch-noops") + ["--torch", "--"] + bare_cmd, {"MLPROF_TORCH_OPS": "0"}),
        "emit_itt": (bare_cmd, {"TRAIN_EMIT_ITT": "1"}),
        # PyTorch's op ranges entered by the training loop (main process only, after the
        # DataLoader's workers started), recorded by the collector without --torch
        "plain-itt": (collect("plain-itt") + ["--"] + bare_cmd, {"TRAIN_EMIT_ITT": "1"}),
        # the same from before the set-up, workers included: --torch's op ranges, no Python hooks
        "plain-itt-early": (collect("plain-itt-early") + ["--"] + bare_cmd, {"TRAIN_EMIT_ITT": "early"}),
    }
    chosen = [v for v in args.variants.split(",") if v]
    unknown = [v for v in chosen if v not in variants]
    if unknown:
        ap.error(f"unknown variants {unknown}; known: {', '.join(variants)}")
    samples = {name: {} for name in ["bare"] + chosen}
    for r in range(args.rounds):
        order = ["bare"] + chosen
        order = order[r % len(order) :] + order[: r % len(order)]
        for name in order:
            cmd, extra = (bare_cmd, {}) if name == "bare" else variants[name]
            s = timed(cmd, extra)
            if s is not None:
                samples[name][r] = s
                print(
                    f"round {r} {name:15}: steps {s['steps_s']:.3f} s  wall {s['wall_s']:.2f} s  cpu {s['cpu_s']:.2f} s",
                    flush=True,
                )
    bare = samples["bare"]
    for name in chosen:
        for key, what in (
            ("steps_s", "timed steps (wall)"),
            ("wall_s", "whole process (wall)"),
            ("cpu_s", "CPU time (all processes)"),
        ):
            ratios = stats.paired(samples[name], bare, key)
            med, lo, hi = stats.median_ci(ratios)
            print(f"{name} vs bare, {what}: {stats.fmt_ratio_ci(med, lo, hi)} over {len(ratios)} pairs")
    for name, d in samples.items():
        med, lo, hi = stats.median_ci([s["steps_s"] / s["steps"] * 1e3 for s in d.values()])
        if med is not None:
            print(f"{name}: ms per step {med:.2f}" + ("" if lo is None else f" [{lo:.2f}, {hi:.2f}]"))
    # The profiled run whose files are shown: --torch's last, else any collector variant's.
    shown = next((n for n in ("torch", "torch-noenergy", "plain") if samples.get(n)), None)
    prof = samples[shown] if shown else {}
    run_bin = os.path.join(tmp, f"run_{shown}.bin")
    if not prof:
        return 1
    last = prof[max(prof)]
    print("collector stderr of the last profiled run:\n" + last["stderr"][-3000:])
    mlprof = os.path.join(bins, "mlprof")
    for cmd in (["summary", run_bin], ["energy", run_bin]):
        out = subprocess.run([mlprof] + cmd, capture_output=True, text=True)
        print(
            f"$ mlprof {' '.join(cmd[:1])} run.bin (rc {out.returncode})\n{out.stdout[:6000]}{out.stderr[-2000:]}"
        )
    summary = json.loads(
        subprocess.run(
            [mlprof, "summary", "--json", run_bin], capture_output=True, text=True, check=True
        ).stdout
    )
    t0 = time.monotonic()
    conv = subprocess.run(
        [mlprof, "convert", run_bin, "-o", os.path.join(tmp, "t.pftrace")], capture_output=True, text=True
    )
    print(
        f"convert rc {conv.returncode} in {time.monotonic() - t0:.2f} s, "
        f"{os.path.getsize(os.path.join(tmp, 't.pftrace')) if conv.returncode == 0 else 0} bytes; run.bin {os.path.getsize(run_bin)} bytes"
    )
    print(f"recorded={summary.get('events')} dropped={summary.get('dropped')}")
    if args.keep:
        # Each profiled variant's last run file (the shown one as torch_cuda_run.bin), so that
        # a variant's records can be set beside --torch's afterwards.
        os.makedirs(args.keep, exist_ok=True)
        shutil.copy(run_bin, os.path.join(args.keep, "torch_cuda_run.bin"))
        for name in chosen:
            other = os.path.join(tmp, f"run_{name}.bin")
            if name != shown and os.path.exists(other):
                shutil.copy(other, os.path.join(args.keep, f"torch_cuda_run_{name}.bin"))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

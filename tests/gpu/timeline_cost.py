#!/usr/bin/env python3
"""What the GPU timeline costs (issue 35's targets, needs an NVIDIA GPU): each round runs a job
bare, under `mlprof-collect --no-gpu-timeline` and under `mlprof-collect` (timeline on), in
rotated order, and reports per variant against bare in the same round the timed steps' wall
time, the whole process's wall time and the CPU time of its tree, as medians of per-pair ratios
with 95 % bootstrap intervals (bench/stats.py), and the timeline against the collector without
it (its own share).

Jobs: `cnn` (tests/gpu/timeline_torch.py: launch-bound, ~50 kernels a 1.6 ms step; target
≤ 5 %), `resnet50` (tests/gpu/resnet50_jpeg.py: ResNet-50 with a JPEG DataLoader; target ≤ 1 %).

    timeline_cost.py --job cnn|resnet50 [--rounds N] [--steps N] [--bin-dir DIR] [--python PY] [--keep DIR]
"""

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import run as common  # bench/run.py: run_cmd
import stats

here = os.path.dirname(os.path.abspath(__file__))

JOBS = {"cnn": ("timeline_torch.py", 5.0), "resnet50": ("resnet50_jpeg.py", 1.0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", choices=sorted(JOBS), required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument(
        "--bin-dir",
        default=os.environ.get("MLPROF_BIN_DIR", os.path.join(here, "..", "..", "target", "release")),
    )
    ap.add_argument("--python", default=os.environ.get("PYTHON", sys.executable))
    ap.add_argument(
        "--keep", default=os.environ.get("MLPROF_GPU_KEEP"), help="copy the last timeline run here"
    )
    args = ap.parse_args()
    script, target = JOBS[args.job]
    bare = [args.python, os.path.join(here, script), str(args.steps)]
    tmp = tempfile.mkdtemp(prefix="mlprof-timeline-cost-")
    collect = os.path.join(os.path.abspath(args.bin_dir), "mlprof-collect")
    variants = {
        "bare": bare,
        "notimeline": [collect, "--quiet", "--no-gpu-timeline", "--out", os.path.join(tmp, "off.bin"), "--"]
        + bare,
        "timeline": [collect, "--quiet", "--out", os.path.join(tmp, "on.bin"), "--"] + bare,
    }
    names = list(variants)
    samples = {name: {} for name in names}
    for r in range(args.rounds):
        for name in names[r % 3 :] + names[: r % 3]:
            try:
                res = common.run_cmd(variants[name], {}, echo=False, need_ns=False)
            except common.BenchError as e:
                print(f"round {r} {name}: FAILED: {e}")
                continue
            s = {"steps_s": float(res["kv"]["steps_s"]), "wall_s": res["wall_s"], "cpu_s": res["tree_cpu_s"]}
            samples[name][r] = s
            print(
                f"round {r} {name:10}: steps {s['steps_s']:.3f} s  wall {s['wall_s']:.2f} s  cpu {s['cpu_s']:.2f} s"
            )
    verdicts = []
    for name, base in (("notimeline", "bare"), ("timeline", "bare"), ("timeline", "notimeline")):
        for key, what in (("steps_s", "timed steps"), ("wall_s", "process wall"), ("cpu_s", "tree CPU")):
            med, lo, hi = stats.median_ci(stats.paired(samples[name], samples[base], key))
            print(f"{args.job}: {name} vs {base}, {what}: {stats.fmt_ratio_ci(med, lo, hi)}")
            if (name, base, key) == ("timeline", "bare", "steps_s") and med is not None:
                verdicts.append(stats.verdict(lo, hi, 1 + target / 100))
    print(f"{args.job}: target ≤ +{target} % (timed steps, timeline vs bare): {', '.join(verdicts)}")
    if args.keep and os.path.exists(os.path.join(tmp, "on.bin")):
        os.makedirs(args.keep, exist_ok=True)
        shutil.copy(os.path.join(tmp, "on.bin"), os.path.join(args.keep, f"cost_{args.job}_timeline.bin"))
    return 0 if samples["timeline"] else 1


if __name__ == "__main__":
    sys.exit(main())

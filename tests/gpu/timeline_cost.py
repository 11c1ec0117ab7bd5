#!/usr/bin/env python3
"""What the GPU timeline costs (issue 35's targets, needs an NVIDIA GPU): each round runs a job
bare, under `mlprof-collect` (no timeline, the default) and `mlprof-collect --gpu-timeline`, in
rotated order, and reports per variant against bare in the same round the timed steps' wall
time, the whole process's wall time and the CPU time of its tree, as medians of per-pair ratios
with 95 % bootstrap intervals (bench/stats.py), and the timeline against the collector without
it (its own share).

Jobs: `cnn` (tests/gpu/timeline_torch.py: launch-bound, ~50 kernels a 1.6 ms step; target
≤ 5 %), `resnet50` (tests/gpu/resnet50_jpeg.py: ResNet-50 with a JPEG DataLoader; target ≤ 1 %).

    timeline_cost.py --job cnn|resnet50 [--rounds N] [--steps N] [--bin-dir DIR] [--python PY]
                     [--variants bare,notimeline,timeline,...] [--keep DIR]

Variants beyond the three: the timeline without links (`nolinks`, MLPROF_CUPTI_LINKS=off),
kernels alone without links (`kernelsonly`), without the timestamp callback (`calibrate`), and
torch.profiler's CUDA activities instead of mlprof (`torchprof`, cnn only: the timed steps run
inside the profiler).
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
        "--variants",
        default="bare,notimeline,timeline",
        help="bare first, then of: notimeline, timeline, nolinks, kernelsonly, calibrate, torchprof (cnn only)",
    )
    ap.add_argument(
        "--keep", default=os.environ.get("MLPROF_GPU_KEEP"), help="copy each variant's last run here"
    )
    args = ap.parse_args()
    script, target = JOBS[args.job]
    bare = [args.python, os.path.join(here, script), str(args.steps)]
    tmp = tempfile.mkdtemp(prefix="mlprof-timeline-cost-")
    collect = os.path.join(os.path.abspath(args.bin_dir), "mlprof-collect")

    def under_mlprof(name, *flags):
        return [collect, "--quiet", *flags, "--out", os.path.join(tmp, f"{name}.bin"), "--"] + bare

    # name: (command, environment); the timeline's parts left out one at a time by the
    # MLPROF_CUPTI_* switches, and torch.profiler's CUDA activities (its own CUPTI) as a yardstick.
    known = {
        "bare": (bare, {}),
        "notimeline": (under_mlprof("notimeline"), {}),
        "timeline": (under_mlprof("timeline", "--gpu-timeline"), {}),
        "nolinks": (under_mlprof("nolinks", "--gpu-timeline"), {"MLPROF_CUPTI_LINKS": "off"}),
        "kernelsonly": (
            under_mlprof("kernelsonly", "--gpu-timeline"),
            {"MLPROF_CUPTI_LINKS": "off", "MLPROF_CUPTI_KINDS": "kernel"},
        ),
        "calibrate": (under_mlprof("calibrate", "--gpu-timeline"), {"MLPROF_CUPTI_CLOCK": "calibrate"}),
        "torchprof": (bare + ["--profile"], {}),
    }
    names = args.variants.split(",")
    unknown = [name for name in names if name not in known]
    if unknown or names[:1] != ["bare"]:
        ap.error(f"--variants: bare first, then any of {', '.join(known)} (not {', '.join(unknown)})")
    samples = {name: {} for name in names}
    for r in range(args.rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            cmd, env = known[name]
            try:
                res = common.run_cmd(cmd, env, echo=False, need_ns=False)
            except common.BenchError as e:
                print(f"round {r} {name}: FAILED: {e}")
                continue
            s = {"steps_s": float(res["kv"]["steps_s"]), "wall_s": res["wall_s"], "cpu_s": res["tree_cpu_s"]}
            samples[name][r] = s
            print(
                f"round {r} {name:11}: steps {s['steps_s']:.3f} s  wall {s['wall_s']:.2f} s  cpu {s['cpu_s']:.2f} s"
            )
    verdicts = []
    pairs = [(name, "bare") for name in names[1:]]
    pairs += [(name, "notimeline") for name in names if name not in ("bare", "notimeline", "torchprof")]
    pairs = [(a, b) for a, b in pairs if b in samples]
    for name, base in pairs:
        for key, what in (("steps_s", "timed steps"), ("wall_s", "process wall"), ("cpu_s", "tree CPU")):
            med, lo, hi = stats.median_ci(stats.paired(samples[name], samples[base], key))
            print(f"{args.job}: {name} vs {base}, {what}: {stats.fmt_ratio_ci(med, lo, hi)}")
            if (name, base, key) == ("timeline", "bare", "steps_s") and med is not None:
                verdicts.append(stats.verdict(lo, hi, 1 + target / 100))
    print(
        f"{args.job}: target ≤ +{target} % (timed steps, timeline vs bare): {', '.join(verdicts) or 'not measured'}"
    )
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        for name in names:
            if os.path.exists(os.path.join(tmp, f"{name}.bin")):
                shutil.copy(
                    os.path.join(tmp, f"{name}.bin"), os.path.join(args.keep, f"cost_{args.job}_{name}.bin")
                )
    return 0 if all(samples.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

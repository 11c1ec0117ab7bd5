#!/usr/bin/env python3
"""What `mlprof-collect --sample` costs a DataLoader image workload (issue 37's target: at most
2 % wall at the default rate). Each round runs, in rotated order, tests/scripts/hot_dataloader.py
(JPEG decode, RandomResizedCrop, ToTensor, Normalize in 2 workers) under the collector without
and with `--sample` (and, with --torch, both under `--torch`); each run times its epochs inside
the process (`loop_s`, start-up excluded). Reported: per variant the median loop time, the median
of per-round ratios against the same collector without sampling with a 95 % bootstrap interval,
and the CPU time of the whole tree (the collector's unwinding included).

    sample_cost.py [--rounds N] [--images N] [--epochs N] [--hz HZ[,HZ...]] [--torch] [--bin-dir DIR]
                   [--python PY]
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as common
import stats


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument(
        "--hz", default=None, help="--sample=HZ, or HZ,HZ,... for one variant each (default: the collector's)"
    )
    ap.add_argument("--torch", action="store_true", help="both variants under --torch")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--bin-dir", default=os.path.join(here, "..", "target", "release"))
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mlprof-sample-cost-")
    images = os.path.join(tmp, "images")
    script = os.path.join(here, "..", "tests", "scripts", "hot_dataloader.py")
    job = [args.python, script, images, str(args.images), str(args.epochs), "fork"]
    common.run_cmd(job, echo=False, need_ns=False)  # makes the images
    collect = os.path.join(os.path.abspath(args.bin_dir), "mlprof-collect")
    base = [collect, "--quiet"] + (["--torch"] if args.torch else [])
    variants = {
        "bare": job,
        "mlprof": base + ["--out", os.path.join(tmp, "plain.bin"), "--"] + job,
    }
    for hz in args.hz.split(",") if args.hz else [None]:
        name = "sample" if hz is None else f"sample{hz}"
        flag = "--sample" if hz is None else f"--sample={hz}"
        variants[name] = base + [flag, "--out", os.path.join(tmp, f"{name}.bin"), "--"] + job
    names = list(variants)
    samples = {name: {} for name in names}
    for r in range(args.rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            res = common.run_cmd(variants[name], echo=False, need_ns=False)
            samples[name][r] = {"loop_s": float(res["kv"]["loop_s"]), "cpu_s": res["tree_cpu_s"]}
        print(f"round {r}: " + "  ".join(f"{n} {samples[n][r]['loop_s']:.3f} s" for n in names), flush=True)
    for name in names:
        loops = [s["loop_s"] for s in samples[name].values()]
        print(f"{name:10}: median {stats.median_ci(loops)[0]:.3f} s, min {min(loops):.3f} s")
    pairs = [("mlprof", "bare")] + [
        (n, b) for n in names if n.startswith("sample") for b in ("bare", "mlprof")
    ]
    for name, base_name in pairs:
        wall = stats.median_ci(stats.paired(samples[name], samples[base_name], "loop_s"))
        cpu = stats.median_ci(stats.paired(samples[name], samples[base_name], "cpu_s"))
        print(
            f"{name} vs {base_name}: loop wall {stats.fmt_ratio_ci(*wall)}; tree CPU {stats.fmt_ratio_ci(*cpu)}"
        )


if __name__ == "__main__":
    main()

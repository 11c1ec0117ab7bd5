#!/usr/bin/env python3
"""The cost of one ITT range received from an application, in C, without Python's noise.

Builds bench/itt_pairs.c with Intel's ittnotify static part (the sources the ittapi-sys crate
ships, found in cargo's registry) and times N range pairs per process, the way PyTorch's
range_push/range_pop make them (a string handle looked up by name, task begin, task end, in a
domain the static part created before it loaded any collector):

  bare    no INTEL_LIBITTNOTIFY64: every ITT call is the static part's null check (~0 ns)
  mlprof  under `mlprof-collect`: the calls reach libmlprof.so
  base    (with --base-bin-dir) an older build's collector and library, in the same rounds

Rounds interleave the variants (order rotated); reported: per variant the median and minimum
ns per pair, and the median of the per-round differences against bare with a bootstrap 95 %
confidence interval (bench/stats.py).

    bench/itt_cost.py [--rounds 9] [--pairs 10000000] [--bin-dir target/release] [--base-bin-dir DIR]
                      [--exe PATH]

--exe takes an itt_pairs built before (`--build-only PATH` writes one), for a machine without
cargo's registry or a compiler, such as the GPU machine.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stats import median_ci

HERE = os.path.dirname(os.path.abspath(__file__))


def ittnotify_sources():
    home = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
    found = sorted(glob.glob(os.path.join(home, "registry/src/*/ittapi-sys-*/c-library")))
    if not found:
        sys.exit(
            "itt_cost.py: ittapi-sys's sources are not in cargo's registry: run `cargo build --release` first"
        )
    return found[-1]


def build(exe):
    itt = ittnotify_sources()
    subprocess.run(
        [
            "gcc",
            "-O2",
            f"-I{itt}/include",
            f"-I{itt}/src/ittnotify",
            os.path.join(HERE, "itt_pairs.c"),
            f"{itt}/src/ittnotify/ittnotify_static.c",
            "-ldl",
            "-o",
            exe,
        ],
        check=True,
    )
    return exe


def ns_per_pair(cmd):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLPROF_", "INTEL_LIBITTNOTIFY"))}
    env.pop("LD_PRELOAD", None)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])["ns_per_pair"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--pairs", type=int, default=10_000_000)
    ap.add_argument("--bin-dir", default=os.environ.get("MLPROF_BIN_DIR", "target/release"))
    ap.add_argument("--base-bin-dir")
    ap.add_argument("--exe", help="an itt_pairs built before (default: build one now)")
    ap.add_argument("--build-only", metavar="PATH", help="build itt_pairs at PATH and stop")
    args = ap.parse_args()
    if args.build_only:
        build(args.build_only)
        return 0
    tmp = tempfile.mkdtemp(prefix="mlprof-itt-cost-")
    exe = os.path.abspath(args.exe) if args.exe else build(os.path.join(tmp, "itt_pairs"))
    run_bin = os.path.join(tmp, "run.bin")

    def under(bin_dir):
        collect = os.path.join(os.path.abspath(bin_dir), "mlprof-collect")
        return [collect, "-q", "--no-energy", "--out", run_bin, "--", exe, str(args.pairs)]

    variants = {"bare": [exe, str(args.pairs)], "mlprof": under(args.bin_dir)}
    if args.base_bin_dir:
        variants["base"] = under(args.base_bin_dir)
    names = list(variants)
    samples = {name: [] for name in names}
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            samples[name].append(ns_per_pair(variants[name]))
        print(
            f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n} {samples[n][-1]:.1f}" for n in names),
            file=sys.stderr,
        )

    print(f"ITT range pairs ({args.pairs:,} per process, {args.rounds} rounds), ns per pair\n")
    print("| variant | median | min | added to bare: median of round differences [95 % CI] | min vs min |")
    print("|---|--:|--:|--:|--:|")
    bare = samples["bare"]
    for name in names:
        xs = samples[name]
        med, lo, hi = median_ci(xs)
        if name == "bare":
            print(f"| {name} | {med:.1f} | {min(xs):.1f} | | |")
            continue
        d, dlo, dhi = median_ci([x - b for x, b in zip(xs, bare)])
        ci = f" [{dlo:+.1f}, {dhi:+.1f}]" if dlo is not None else ""
        print(f"| {name} | {med:.1f} | {min(xs):.1f} | {d:+.1f}{ci} | {min(xs) - min(bare):+.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

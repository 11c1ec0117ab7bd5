#!/usr/bin/env python3
"""mlprof's cost on PyTorch annotations.

1. Per ITT range: torch.profiler.itt.range_push/range_pop pairs in a loop, bare (ITT's static
   part with no collector: a null call) vs under `mlprof-collect` (each pair becomes a span
   record). The difference per pair is mlprof's cost per range received.
2. Per op span: a small CPU training step (3-layer MLP, batch 8, SGD) timed bare, under
   `mlprof-collect --torch` (emit_itt op ranges + phase spans for the whole run), with emit_itt
   but no collector (PyTorch's own share), and bare with torch.profiler recording CPU ops. The extra time per iteration divided by the ops per
   iteration (counted by torch.profiler) is the cost per op span.
3. Op shapes: the same step under `mlprof-collect --torch-shapes` against `--torch`; the extra
   time per iteration per op, and per shape marker (the Python-level torch calls with tensor
   arguments, counted from the run's itt_marker records).

    bench/torch_overhead.py [--bin-dir target/release] [--python PY] [--pairs N] [--iters N] [--repeat N]

Each configuration runs --repeat times in a fresh process, every configuration once per round in
an order rotated round by round; medians are reported, and the op span's cost against
torch.profiler's as the median of per-round differences with a bootstrap 95 % interval.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stats import median_ci


def inner_ranges(pairs):
    import torch

    itt = torch.profiler.itt
    push, pop = itt.range_push, itt.range_pop
    for _ in range(1000):
        push("bench.range")
        pop()
    start = time.perf_counter_ns()
    for _ in range(pairs):
        push("bench.range")
        pop()
    elapsed = time.perf_counter_ns() - start
    return {"ns_per_pair": elapsed / pairs}


def mlp_step(device="cpu"):
    """The small training step of the op-span measurement (3-layer MLP, batch 8, SGD; 161 ops),
    as a function; also tests/gpu/torch_step_cost.py's `--model mlp`."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    x, y = torch.randn(8, 64, device=device), torch.randint(0, 10, (8,), device=device)

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    return step


def inner_ops(iters, mode):
    import torch

    step = mlp_step()
    for _ in range(50):
        step()
    ops = None
    if mode == "profiler":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter_ns()
            for _ in range(iters):
                step()
            elapsed = time.perf_counter_ns() - start
        ops = len(prof.events()) / iters
    elif mode == "emit_itt":
        with torch.autograd.profiler.emit_itt():
            start = time.perf_counter_ns()
            for _ in range(iters):
                step()
            elapsed = time.perf_counter_ns() - start
    else:
        start = time.perf_counter_ns()
        for _ in range(iters):
            step()
        elapsed = time.perf_counter_ns() - start
    return {"ns_per_iter": elapsed / iters, "ops_per_iter": ops}


def run(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(os.path.dirname(__file__), "..", "target", "release"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--pairs", type=int, default=100000)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--inner", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        kind = args.inner[0]
        result = (
            inner_ranges(int(args.inner[1]))
            if kind == "ranges"
            else inner_ops(int(args.inner[1]), args.inner[2])
        )
        print(json.dumps(result))
        return 0

    collect = os.path.abspath(os.path.join(args.bin_dir, "mlprof-collect"))
    me = os.path.abspath(__file__)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLPROF_") and k != "LD_PRELOAD"}
    tmp = tempfile.mkdtemp(prefix="mlprof-torch-bench-")

    def under(extra, inner, out):
        return (
            [collect, "-q", "--no-energy", "--out", os.path.join(tmp, out)]
            + extra
            + ["--", args.python, me, "--inner"]
            + inner
        )

    ranges = ["ranges", str(args.pairs)]
    ops = ["ops", str(args.iters)]
    inner = [args.python, me, "--inner"]
    # Every configuration once per round, the order rotated round by round: the host drifts
    # by more than the differences measured, so only values from the same rounds are compared.
    configs = {
        "bare_pair": (inner + ranges, "ns_per_pair"),
        "mlprof_pair": (under([], ranges, "ranges.bin"), "ns_per_pair"),
        "bare_iter": (inner + ops + ["bare"], "ns_per_iter"),
        "torch_iter": (under(["--torch"], ops + ["bare"], "torch.bin"), "ns_per_iter"),
        "itt_iter": (inner + ops + ["emit_itt"], "ns_per_iter"),
        "shapes_iter": (under(["--torch-shapes"], ops + ["bare"], "shapes.bin"), "ns_per_iter"),
        "prof_iter": (inner + ops + ["profiler"], "ns_per_iter"),
    }
    names = list(configs)
    values = {name: [] for name in names}
    ops_per_iter = None
    for r in range(args.repeat):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            cmd, key = configs[name]
            result = run(cmd, env)
            values[name].append(result[key])
            if name == "prof_iter" and ops_per_iter is None:
                ops_per_iter = result["ops_per_iter"]
        print(f"round {r + 1}/{args.repeat} done", file=sys.stderr)
    bare_pair, mlprof_pair, bare_iter, torch_iter, itt_iter, shapes_iter, prof_iter = (
        statistics.median(values[name]) for name in names
    )
    mlprof = os.path.abspath(os.path.join(args.bin_dir, "mlprof"))
    summary = subprocess.run(
        [mlprof, "summary", "--json", os.path.join(tmp, "shapes.bin")],
        check=True,
        capture_output=True,
        text=True,
    )
    markers = json.loads(summary.stdout)["calls"].get("itt_marker", {}).get("count", 0)
    markers_per_iter = markers / (args.iters + 50)  # inner_ops runs 50 warm-up steps
    # The target's comparison, round by round: --torch's op span against torch.profiler's.
    span_vs_profiler = median_ci(
        [(t - p) / ops_per_iter for t, p in zip(values["torch_iter"], values["prof_iter"])]
    )

    print("ITT ranges (torch.profiler.itt.range_push/pop, %d pairs):" % args.pairs)
    print(f"  bare                 {bare_pair:8.0f} ns/pair")
    print(f"  under mlprof         {mlprof_pair:8.0f} ns/pair  (+{mlprof_pair - bare_pair:.0f} ns per range)")
    print(
        "Op spans (MLP training step, %d iterations, %.0f ops/iteration per torch.profiler):"
        % (args.iters, ops_per_iter)
    )
    print("  bare                 %8.1f us/iter" % (bare_iter / 1e3))
    print(
        f"  mlprof --torch       {torch_iter / 1e3:8.1f} us/iter  (+{(torch_iter - bare_iter) / ops_per_iter:.0f} ns per op)"
    )
    print(
        f"  emit_itt, no collector {itt_iter / 1e3:6.1f} us/iter  (+{(itt_iter - bare_iter) / ops_per_iter:.0f} ns per op: PyTorch's own ITT path)"
    )
    print(
        f"  torch.profiler (CPU) {prof_iter / 1e3:8.1f} us/iter  (+{(prof_iter - bare_iter) / ops_per_iter:.0f} ns per op)"
    )
    med, lo, hi = span_vs_profiler
    ci = f" [{lo:+.0f}, {hi:+.0f}]" if lo is not None else ""
    print(f"  --torch minus torch.profiler, per round: {med:+.0f}{ci} ns per op (median, 95 % CI)")
    extra = shapes_iter - torch_iter
    print("Op shapes (--torch-shapes against --torch, %.1f shape markers/iteration):" % markers_per_iter)
    print(
        f"  mlprof --torch-shapes {shapes_iter / 1e3:7.1f} us/iter  (+{extra / ops_per_iter:.0f} ns per op, "
        f"+{extra / max(markers_per_iter, 1e-9):.0f} ns per marked call)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

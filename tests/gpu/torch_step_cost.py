#!/usr/bin/env python3
"""Where `--torch`'s cost in a training step goes, measured inside one process.

Between processes, a bare training run on the GPU machine varies by ±15 % in its timed steps
(start-up, memory placement, clocks), more than the parts of `--torch` it should tell apart.
Here one process switches those parts on and off between blocks of --block steps, in rotated
order, --rounds times:

  bare  nothing of --torch;
  ops   PyTorch's op ranges (`emit_itt`): PyTorch's RecordFunction callbacks and, when
        libmlprof.so is loaded, its ITT entry points (a string handle, a task begin and end
        per op);
  full  ops + what --torch installs in the training process besides: the phase wrappers
        (`nn.Module.__call__`, `torch.autograd.backward`, optimizer hooks) and the main
        process's DataLoader spans (batch.wait, batch.consume);
  prof  (when asked for) torch.profiler recording CPU ops instead, the yardstick of issue 10's
        "op span under --torch ≤ torch.profiler's CPU-op cost": compare ops − bare with
        prof − bare (and ops − prof) in the same run.

It prints ms per step of each (median over rounds, 95 % bootstrap interval) and the per-round
differences ops − bare and full − ops. Run it once under plain `mlprof-collect` (the library
loaded, no --torch: this script installs the parts itself) and once without, so that ops − bare
splits into PyTorch's own share and libmlprof's:

    mlprof-collect --no-energy --out r.bin -- python3 tests/gpu/torch_step_cost.py
    python3 tests/gpu/torch_step_cost.py --variants bare,ops

(Not with python/ on PYTHONPATH: its sitecustomize.py would install the whole hook at start.)

The model is tests/gpu/torch_cuda_overhead.py's (tests/gpu/resnet_job.py: ResNet-18, batch
128 of 64×64 synthetic images, SGD, a DataLoader with 2 workers); `--device cpu --batch 2 --size
16` checks the
script on a machine without a GPU (its figures say nothing about a GPU step), and
`--device cpu --model mlp --block 300 --rounds 30` splits bench/torch_overhead.py's small CPU
step the same way (`--model deep`: 80 nested module calls a step).
"""

import argparse
import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # resnet_job.py
import stats  # bench/stats.py


class Parts:
    """Installs and removes the in-process parts of --torch, through mlprof_torch's own code."""

    def __init__(self, torch):
        from mlprof_torch import hooks
        from torch.utils.data import dataloader

        self.torch, self.hooks, self.dataloader = torch, hooks, dataloader
        self.ops = None
        self.prof = None
        self.saved = []
        self.handles = []

    def loaded(self):
        return self.hooks._tracker is not None

    def ops_on(self):
        self.ops = self.torch.autograd.profiler.emit_itt()
        self.ops.__enter__()

    def ops_off(self):
        if self.ops is not None:
            self.ops.__exit__(None, None, None)
            self.ops = None

    def prof_on(self):
        # torch.profiler recording CPU ops (what issue 10 holds --torch's op spans against);
        # its exit, which processes the events, falls outside the timed block.
        self.prof = self.torch.profiler.profile(activities=[self.torch.profiler.ProfilerActivity.CPU])
        self.prof.__enter__()

    def prof_off(self):
        self.prof.__exit__(None, None, None)
        self.prof = None

    def full_on(self):
        hooks = self.hooks
        # The hook's own lists of what a step runs through (not torch.save/load, nor what the
        # already forked DataLoader workers run).
        targets = hooks._step_patches(self.torch) + hooks._loader_step_patches(self.dataloader)
        for owner, attr, make in targets:
            # vars(), not getattr(): the class's own entry, restored as it was.
            self.saved.append((owner, attr, vars(owner).get(attr)))
            hooks._patch(owner, attr, make)
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self.handles = [
            register_optimizer_step_pre_hook(hooks._step_pre),
            register_optimizer_step_post_hook(hooks._step_post),
        ]

    def full_off(self):
        for owner, attr, original in reversed(self.saved):
            if original is None:
                delattr(owner, attr)  # it was inherited: the base class's shows again
            else:
                setattr(owner, attr, original)
        self.saved = []
        for handle in self.handles:
            handle.remove()
        self.handles = []


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--block", type=int, default=30, help="steps per block")
    ap.add_argument("--variants", default="bare,ops,full")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--model", choices=["resnet18", "mlp", "deep"], default="resnet18")
    args = ap.parse_args()

    import torch
    import torch.nn as nn

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if args.model == "deep":
        # 40 × (Linear 16×16, ReLU): 80 nested module calls a step, where the forward-phase
        # wrapper's cost for a nested call shows.
        torch.manual_seed(0)
        torch.set_num_threads(1)
        model = nn.Sequential(*[m for _ in range(40) for m in (nn.Linear(16, 16), nn.ReLU())]).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        xs, ys = torch.randn(4, 16, device=dev), torch.randint(0, 16, (4,), device=dev)

        def step():
            opt.zero_grad()
            nn.functional.cross_entropy(model(xs), ys).backward()
            opt.step()

    elif args.model == "mlp":
        # bench/torch_overhead.py's step: 161 tiny ops, no DataLoader; a CPU-bound step where
        # every per-step cost of --torch shows.
        from torch_overhead import mlp_step

        step = mlp_step(dev)

    else:
        from resnet_job import resnet_step  # torch_cuda_overhead.py's job, in this process

        step = resnet_step(dev, args.batch, args.size)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    parts = Parts(torch)
    import mlprof_torch

    # Our own finder's class, not its name: the GPU machine's Python has another `_Finder` on
    # sys.meta_path, which a name test mistook for ours.
    ours = [f for f in sys.meta_path if isinstance(f, mlprof_torch._Finder)]
    if parts.hooks._state["ops"] is not None or ours:
        # Under --torch (or with python/ on PYTHONPATH, whose sitecustomize.py installs the hook)
        # every block would have all of it on: the variants would not differ.
        why = (
            "its op ranges are on"
            if parts.hooks._state["ops"] is not None
            else f"{ours[0]!r} is on sys.meta_path"
        )
        print(
            f"torch_step_cost: error: the --torch hook is already installed ({why}); run under plain mlprof-collect"
        )
        return 2
    chosen = [v for v in args.variants.split(",") if v]
    if "full" in chosen and not parts.loaded():
        print("torch_step_cost: skipping variant full: libmlprof.so is not loaded (run under mlprof-collect)")
        chosen.remove("full")
    switches = {
        "bare": (contextlib.nullcontext, None),
        "ops": (parts.ops_on, parts.ops_off),
        "full": (lambda: (parts.ops_on(), parts.full_on()), lambda: (parts.full_off(), parts.ops_off())),
        "prof": (parts.prof_on, parts.prof_off),
    }
    print(
        f"torch_step_cost: {args.model}, torch {torch.__version__} on {torch.cuda.get_device_name(0) if cuda else 'cpu'}; "
        f"libmlprof.so {'loaded' if parts.loaded() else 'not loaded'}; variants {','.join(chosen)}; "
        f"{args.rounds} rounds of {args.block}-step blocks",
        flush=True,
    )
    for name in chosen:  # warm-up: cuDNN's choices, the allocator, every variant's first calls
        on, off = switches[name]
        on()
        for _ in range(10):
            step()
        sync()
        if off:
            off()
    per_step = {name: {} for name in chosen}
    for r in range(args.rounds):
        order = chosen[r % len(chosen) :] + chosen[: r % len(chosen)]
        for name in order:
            on, off = switches[name]
            on()
            sync()
            t0 = time.perf_counter_ns()
            for _ in range(args.block):
                step()
            sync()
            per_step[name][r] = {"ms": (time.perf_counter_ns() - t0) / args.block / 1e6}
            if off:
                off()
        print(
            f"round {r}: " + "  ".join(f"{n} {per_step[n][r]['ms']:.3f}" for n in chosen) + " ms/step",
            flush=True,
        )
    for name in chosen:
        med, lo, hi = stats.median_ci([s["ms"] for s in per_step[name].values()])
        print(f"{name}: ms per step {med:.3f}" + ("" if lo is None else f" [{lo:.3f}, {hi:.3f}]"))
    for a, b in (("ops", "bare"), ("full", "ops"), ("full", "bare"), ("prof", "bare"), ("ops", "prof")):
        if a in per_step and b in per_step:
            diffs = stats.paired(per_step[a], per_step[b], "ms", op="diff")
            ratios = stats.paired(per_step[a], per_step[b], "ms")
            med, lo, hi = stats.median_ci(diffs)
            rmed, rlo, rhi = stats.median_ci(ratios)
            print(
                f"{a} - {b}: {med * 1e3:+.1f} µs per step"
                + ("" if lo is None else f" [{lo * 1e3:+.1f}, {hi * 1e3:+.1f}]")
                + f"; {stats.fmt_ratio_ci(rmed, rlo, rhi)} over {len(diffs)} rounds"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

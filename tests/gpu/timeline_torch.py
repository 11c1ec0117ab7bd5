#!/usr/bin/env python3
"""The GPU timeline check's PyTorch job: a small CNN whose training step is launch-bound
(about 50 kernels in ~1.6 ms on an H200), for kernel counts, GPU time and cost.

    timeline_torch.py STEPS [--profile] [--device cuda:0]

5 warm-up steps, then STEPS timed ones (CUDA-synchronized); prints `steps_s=`, `steps=`.
--profile runs the timed steps inside torch.profiler (CUDA activities) and prints
`profiler_kernels=` and `profiler_kernel_ns=` (the kernels it saw and their summed GPU time;
copies and memsets left out), which tests/gpu/timeline_check.sh compares with mlprof's.
"""

import argparse
import contextlib
import time

import torch
import torch.nn as nn


def model_and_step(dev):
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (32,), device=dev)

    def step():
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def kernels_of(prof):
    """(count, summed GPU ns) of the CUDA kernels a torch.profiler run saw."""
    count, total_ns = 0, 0
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        if event.name.startswith(("Memcpy", "Memset")):
            continue
        count += 1
        total_ns += int(round(event.time_range.elapsed_us() * 1000))
    return count, total_ns


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("steps", type=int)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--device", default="cuda:0", help="cpu: check the script without a GPU")
    args = ap.parse_args()
    dev = torch.device(args.device)
    step = model_and_step(dev)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(5):
        step()
    sync()
    prof = (
        torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
        if args.profile
        else contextlib.nullcontext()
    )
    with prof:
        t0 = time.perf_counter_ns()
        for _ in range(args.steps):
            step()
        sync()
        elapsed = time.perf_counter_ns() - t0
    print(f"steps_s={elapsed / 1e9:.6f}")
    print(f"steps={args.steps}")
    if args.profile:
        count, total_ns = kernels_of(prof)
        print(f"profiler_kernels={count}")
        print(f"profiler_kernel_ns={total_ns}")


if __name__ == "__main__":
    main()

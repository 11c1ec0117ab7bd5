#!/usr/bin/env python3
"""The CUDA training job of the GPU overhead measurements: a ResNet-18 on synthetic images
(batch 128 of 64×64, SGD with momentum, a DataLoader with 2 workers and pinned memory).

`resnet_step()` builds it and returns one training step; tests/gpu/torch_step_cost.py times
it inside one process. Run as a script, it is the process tests/gpu/torch_cuda_overhead.py
times bare and under the collector:

    python3 tests/gpu/resnet_job.py STEPS

20 warm-up steps, then STEPS timed ones (CUDA-synchronized), printing `steps_s=` and `steps=`.
TRAIN_EMIT_ITT=1 wraps the timed loop in PyTorch's `emit_itt` (op ranges, main process only);
TRAIN_EMIT_ITT=early enables it before the set-up, so the forked DataLoader workers inherit it
(as `--torch` has them). TRAIN_DEVICE (default cuda:0) runs it elsewhere, to check the script.
"""

import contextlib
import os
import sys
import time

import torch
import torch.nn as nn
import torchvision


class Synthetic(torch.utils.data.Dataset):
    """Images of `size`×`size` in 100 classes, each the same whenever it is asked for."""

    def __init__(self, size=64):
        self.size = size

    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, self.size, self.size, generator=g), int(i % 100)


def resnet_step(dev, batch=128, size=64):
    """The job on device `dev`, as a function making one training step and returning its loss."""
    model = torchvision.models.resnet18(num_classes=100).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = torch.utils.data.DataLoader(
        Synthetic(size), batch_size=batch, num_workers=2, pin_memory=dev.type == "cuda", shuffle=False
    )
    batches = iter(loader)

    def step():
        x, y = next(batches)
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def main(steps):
    mode = os.environ.get("TRAIN_EMIT_ITT", "")
    early = torch.autograd.profiler.emit_itt() if mode == "early" else contextlib.nullcontext()
    early.__enter__()
    dev = torch.device(os.environ.get("TRAIN_DEVICE", "cuda:0"))

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    step = resnet_step(dev)
    for _ in range(20):
        step()
    sync()
    itt = torch.autograd.profiler.emit_itt() if mode == "1" else contextlib.nullcontext()
    with itt:
        t0 = time.perf_counter_ns()
        for i in range(steps):
            loss = step()
            if i % 50 == 0:
                loss.item()
        sync()
    print(f"steps_s={(time.perf_counter_ns() - t0) / 1e9}")
    print(f"steps={steps}")


if __name__ == "__main__":
    main(int(sys.argv[1]))

#!/usr/bin/env python3
"""The GPU timeline check's realistic job: ResNet-50 training on JPEG images decoded by a
DataLoader (ImageFolder, RandomResizedCrop, flip, ToTensor, Normalize; 8 workers, pinned memory,
batch 64), for the ≤ 1 % cost target of the GPU timeline.

    resnet50_jpeg.py STEPS [--images DIR]

The images (512 JPEGs of 256×256 in 8 classes, made once with PIL) are kept in --images
(default: a folder in the system's temporary directory). 10 warm-up steps, then STEPS timed
ones (CUDA-synchronized); prints `steps_s=`, `steps=`.
"""

import argparse
import os
import tempfile
import time

import torch
import torch.nn as nn
import torchvision
from PIL import Image


def make_images(root, classes=8, per_class=64, size=256):
    """The dataset, made once: noise-and-gradient images (compress like photos, unlike pure noise)."""
    done = os.path.join(root, ".complete")
    if os.path.exists(done):
        return
    g = torch.Generator().manual_seed(0)
    for c in range(classes):
        folder = os.path.join(root, f"class{c}")
        os.makedirs(folder, exist_ok=True)
        for i in range(per_class):
            ramp = torch.linspace(0, 1, size).view(1, size, 1).expand(3, size, size)
            noise = torch.rand(3, size, size, generator=g) * 0.3
            pixels = ((ramp * 0.7 + noise) * 255).clamp(0, 255).byte().permute(1, 2, 0).numpy()
            Image.fromarray(pixels).save(os.path.join(folder, f"{i}.jpg"), quality=90)
    open(done, "w").close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("steps", type=int)
    ap.add_argument("--images", default=os.path.join(tempfile.gettempdir(), "mlprof-jpeg-images"))
    args = ap.parse_args()
    make_images(args.images)
    t = torchvision.transforms
    transform = t.Compose(
        [
            t.RandomResizedCrop(224),
            t.RandomHorizontalFlip(),
            t.ToTensor(),
            t.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )
    data = torchvision.datasets.ImageFolder(args.images, transform)
    loader = torch.utils.data.DataLoader(
        data,
        batch_size=64,
        shuffle=True,
        num_workers=8,
        pin_memory=True,
        drop_last=True,
        persistent_workers=True,
    )
    dev = torch.device("cuda:0")
    model = torchvision.models.resnet50(num_classes=8).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def batches():
        while True:
            yield from loader

    it = batches()

    def step():
        x, y = next(it)
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    print(f"steps_s={(time.perf_counter_ns() - t0) / 1e9:.6f}")
    print(f"steps={args.steps}")


if __name__ == "__main__":
    main()

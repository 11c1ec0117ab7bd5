#!/usr/bin/env python3
"""Workload (a): image classification from JPEG files.

ImageFolder over ~1.5k small JPEGs (generated once into DATA_DIR/jpeg, cached), torchvision
transforms (RandomResizedCrop, flip, ToTensor, Normalize), a DataLoader with num_workers=2,
a small CNN, SGD, a few hundred steps. CPU only, deterministic (fixed seeds, fixed worker
seeds).

    python bench/workloads/imgcls.py DATA_DIR [--steps 150] [--scale X] [--torch-profile FILE]
"""

import os
import sys
import time

import _common

VERSION = "imgcls-v1 classes=10 per_class=150 size=64"
CLASSES, PER_CLASS, SIZE = 10, 150, 64


def prepare(root):
    marker = os.path.join(root, "jpeg.ok")
    if _common.marker_ok(marker, VERSION):
        return
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(1234)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32) / SIZE
    for c in range(CLASSES):
        d = os.path.join(root, "jpeg", f"class_{c:02d}")
        os.makedirs(d, exist_ok=True)
        fx, fy = 1 + c % 4, 1 + c // 4
        base = np.stack([np.sin(2 * np.pi * (fx * xx + fy * yy + k / 3)) for k in range(3)], -1)
        for i in range(PER_CLASS):
            img = 127 + 90 * base + rng.normal(0, 25, base.shape)
            img = np.clip(img, 0, 255).astype(np.uint8)
            Image.fromarray(img).save(os.path.join(d, f"img_{i:04d}.jpg"), quality=90)
    _common.write_marker(marker, VERSION)


def main():
    args = _common.parse(__doc__, lambda ap: ap.add_argument("--steps", type=int, default=150))
    t_prep = time.monotonic()
    prepare(args.data_dir)
    if args.prepare:
        print(f"prepare_s={time.monotonic() - t_prep:.3f}")
        return 0
    import torch
    import torch.nn as nn
    from torchvision import datasets, transforms

    _common.setup_torch(args)
    tf = transforms.Compose(
        [
            transforms.RandomResizedCrop(48, scale=(0.5, 1.0), antialias=True),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25]),
        ]
    )
    ds = datasets.ImageFolder(os.path.join(args.data_dir, "jpeg"), transform=tf)
    g = torch.Generator()
    g.manual_seed(0)
    dl = torch.utils.data.DataLoader(
        ds, batch_size=32, shuffle=True, num_workers=2, generator=g, persistent_workers=True, drop_last=True
    )
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, CLASSES),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    steps = max(1, int(args.steps * args.scale))
    done, loss_sum, images = 0, 0.0, 0
    t0 = time.monotonic()
    with _common.maybe_profiled(args.torch_profile) as step:
        while done < steps:
            for x, y in dl:
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(model(x), y)
                loss.backward()
                opt.step()
                loss_sum += loss.item()
                images += x.shape[0]
                done += 1
                step()
                if done >= steps:
                    break
    loop_s = time.monotonic() - t0
    _common.report(
        workload="imgcls",
        steps=done,
        images=images,
        loop_s=f"{loop_s:.3f}",
        mean_loss=f"{loss_sum / done:.4f}",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

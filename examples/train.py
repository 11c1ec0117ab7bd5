#!/usr/bin/env python3
"""A small CPU PyTorch training run to profile with mlprof.

    mlprof-collect --out run.bin -- python examples/train.py --data /tmp/shapes --out /tmp/ckpt.pt
    mlprof summary run.bin

What it does:
  * generates (if missing) a tiny image-folder data set under --data:
    two classes (circle/, square/) of --images 32x32 pictures, half PNG and
    half JPEG;
  * loads it with torchvision.datasets.ImageFolder + transforms through a
    DataLoader with --workers worker processes (2 by default), so the image
    files are read by the worker processes;
  * trains a tiny CNN for --epochs epochs (SGD, batch size 16);
  * saves a checkpoint (model + optimizer state) with torch.save to --out.

`--generate-only` only creates the data set.  Runs in a few seconds on 2
CPU cores (most of it is `import torch`).
"""

import argparse
import os
import random
import sys
import time

CLASSES = ("circle", "square")
DONE_MARKER = ".complete"


def generate(root, count, size=32, seed=0):
    """Writes `count` images split over CLASSES, unless already complete."""
    if os.path.exists(os.path.join(root, DONE_MARKER)):
        return
    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    for c in CLASSES:
        os.makedirs(os.path.join(root, c), exist_ok=True)
    for i in range(count):
        cls = CLASSES[i % len(CLASSES)]
        bg = tuple(rng.randrange(0, 96) for _ in range(3))
        fg = tuple(rng.randrange(128, 256) for _ in range(3))
        img = Image.new("RGB", (size, size), bg)
        draw = ImageDraw.Draw(img)
        r = rng.randrange(size // 6, size // 3)
        cx, cy = rng.randrange(r, size - r), rng.randrange(r, size - r)
        box = (cx - r, cy - r, cx + r, cy + r)
        if cls == "circle":
            draw.ellipse(box, fill=fg)
        else:
            draw.rectangle(box, fill=fg)
        ext = "png" if i % 4 < 2 else "jpg"
        img.save(os.path.join(root, cls, "img%03d.%s" % (i, ext)))
    with open(os.path.join(root, DONE_MARKER), "w") as f:
        f.write("%d\n" % count)


def build_model(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, len(CLASSES)),
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data_pos", nargs="?", metavar="DATA", help="data directory (same as --data)")
    ap.add_argument("--data", help="data directory (created if missing)")
    ap.add_argument("--out", default="checkpoint.pt", help="checkpoint path (default: checkpoint.pt)")
    ap.add_argument("--images", type=int, default=64, help="images to generate (default: 64)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2, help="DataLoader num_workers (default: 2)")
    ap.add_argument("--start-method", default=None, help="multiprocessing context for the workers")
    ap.add_argument("--generate-only", action="store_true", help="only create the data set")
    args = ap.parse_args(argv)
    data = args.data or args.data_pos or "data"
    data = os.path.abspath(data)

    generate(data, args.images)
    if args.generate_only:
        print(f"train: data ready in {data}")
        return 0

    t0 = time.time()
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    torch.manual_seed(0)
    torch.set_num_threads(1)
    tf = transforms.Compose(
        [
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
        ]
    )
    ds = datasets.ImageFolder(data, transform=tf)
    loader = DataLoader(
        ds,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        multiprocessing_context=args.start_method if args.workers > 0 else None,
        generator=torch.Generator().manual_seed(0),
    )
    model = build_model(torch)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    steps = 0
    loss = None
    for _epoch in range(args.epochs):
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            steps += 1

    out = os.path.abspath(args.out)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "steps": steps}, out)
    print(
        "train: %d images, %d steps, loss %.4f, checkpoint %s, %.1fs"
        % (len(ds), steps, loss.item() if loss is not None else float("nan"), out, time.time() - t0)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

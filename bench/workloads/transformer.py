#!/usr/bin/env python3
"""Workload (b): a small transformer fine-tune with periodic checkpoints.

Loads a "pretrained" checkpoint (generated once into DATA_DIR/pretrained.pt), then fine-tunes
an nn.TransformerEncoder classifier on random token sequences (a fixed synthetic task: the label
is a function of the tokens, so the loss goes down) with AdamW for a few hundred steps, and
saves a checkpoint (model + optimizer state, torch.save) every --ckpt-every steps into
DATA_DIR/ckpt/, keeping the last two like a real trainer. CPU only, deterministic.

    python bench/workloads/transformer.py DATA_DIR [--steps 200] [--ckpt-every 50]
                                          [--scale X] [--torch-profile FILE]
"""

import glob
import os
import sys
import time

import _common

VERSION = "transformer-v1 vocab=2000 d=128 heads=4 ff=256 layers=2"
VOCAB, D, HEADS, FF, LAYERS, SEQ, BATCH, CLASSES = 2000, 128, 4, 256, 2, 64, 16, 8


def build_model():
    import torch.nn as nn

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, D)
            self.pos = nn.Parameter(0.02 * __import__("torch").randn(SEQ, D))
            layer = nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.1, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
            self.head = nn.Linear(D, CLASSES)

        def forward(self, tokens):
            h = self.enc(self.emb(tokens) + self.pos)
            return self.head(h.mean(1))

    return Classifier()


def prepare(root):
    marker = os.path.join(root, "pretrained.ok")
    if _common.marker_ok(marker, VERSION):
        return
    import torch

    torch.manual_seed(1234)
    torch.save(build_model().state_dict(), os.path.join(root, "pretrained.pt"))
    _common.write_marker(marker, VERSION)


def main():
    def extra(ap):
        ap.add_argument("--steps", type=int, default=200)
        ap.add_argument("--ckpt-every", type=int, default=50)

    args = _common.parse(__doc__, extra)
    t_prep = time.monotonic()
    prepare(args.data_dir)
    if args.prepare:
        print(f"prepare_s={time.monotonic() - t_prep:.3f}")
        return 0
    import torch
    import torch.nn as nn

    _common.setup_torch(args)
    ckdir = os.path.join(args.data_dir, "ckpt")
    os.makedirs(ckdir, exist_ok=True)
    for old in glob.glob(os.path.join(ckdir, "step_*.pt")):
        os.remove(old)
    model = build_model()
    model.load_state_dict(torch.load(os.path.join(args.data_dir, "pretrained.pt"), weights_only=True))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(0)
    steps = max(1, int(args.steps * args.scale))
    loss_sum, ckpts, ckpt_s = 0.0, 0, 0.0
    t0 = time.monotonic()
    with _common.maybe_profiled(args.torch_profile) as step:
        for i in range(1, steps + 1):
            tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
            labels = (tokens[:, :4].sum(1) * 7 // VOCAB) % CLASSES
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(tokens), labels)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            loss_sum += loss.item()
            if i % args.ckpt_every == 0 or i == steps:
                tc = time.monotonic()
                path = os.path.join(ckdir, f"step_{i:05d}.pt")
                torch.save({"step": i, "model": model.state_dict(), "optim": opt.state_dict()}, path)
                for old in sorted(glob.glob(os.path.join(ckdir, "step_*.pt")))[:-2]:
                    os.remove(old)
                ckpts += 1
                ckpt_s += time.monotonic() - tc
            step()
    loop_s = time.monotonic() - t0
    size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(ckdir, "step_*.pt")))
    _common.report(
        workload="transformer",
        steps=steps,
        loop_s=f"{loop_s:.3f}",
        checkpoints=ckpts,
        ckpt_s=f"{ckpt_s:.3f}",
        ckpt_bytes_kept=size,
        mean_loss=f"{loss_sum / steps:.4f}",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

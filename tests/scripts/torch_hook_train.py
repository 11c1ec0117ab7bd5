"""A small training run for `mlprof-collect --torch` (tests/tests/torch_hook.rs): a map-style
data set of tensors through torchvision transforms and a DataLoader with 2 worker processes,
2 epochs of a tiny CNN, torch.save / torch.load, and an op that opens a file (aten::from_file).
No mlprof code: everything recorded comes from the hook.

    torch_hook_train.py OUT_DIR
"""
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

SAMPLES, BATCH, EPOCHS = 64, 8, 2


class Squares(Dataset):
    def __init__(self, transform):
        self.transform = transform

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        x = torch.zeros(3, 16, 16)
        x[:, 4:12, 4:12] = float(i % 5)
        return self.transform(x), i % 2


def main(out):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    tf = transforms.Compose([
        transforms.RandomHorizontalFlip(),
        transforms.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
    ])
    loader = DataLoader(Squares(tf), batch_size=BATCH, shuffle=True, num_workers=2)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 16 * 16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    steps = 0
    for _epoch in range(EPOCHS):
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            steps += 1
    ckpt = os.path.join(out, "ckpt.pt")
    torch.save(model.state_dict(), ckpt)
    torch.load(ckpt)
    raw = os.path.join(out, "raw.bin")
    with open(raw, "wb") as f:
        f.write(b"\0" * 4096)
    torch.from_file(raw, shared=False, size=4096, dtype=torch.uint8)
    print("torch_hook_train: %d steps, checkpoint %s" % (steps, ckpt))
    # Which way the hook's spans went: libmlprof.so's CPython builtins, or ctypes.
    hooks = sys.modules.get("mlprof_torch.hooks")
    fast = hooks is not None and hooks._itt is not None and hooks._itt.builtins
    print("torch_hook_train: spans through %s" % ("builtins" if fast else "ctypes"))


if __name__ == "__main__":
    main(sys.argv[1])

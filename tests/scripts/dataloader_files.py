"""dataloader_files.py DIR CLASSES PER_CLASS

An image-classification input pipeline, as issue 16 describes it, measured in a window that
strace and mlprof can both cut out: the parent writes CLASSES x PER_CLASS small PNG files under
DIR/data/c<k>/, imports and warms everything up, then forks one child that runs the window
and leaves with os._exit(0):

    os.write(-1, b"MLPROF_MARK1")      (EBADF) the window starts
    an ImageFolder-like scan: os.listdir of DIR/data and of each class directory,
        os.path.isdir / os.path.isfile of each entry (stat)
    a DataLoader with 2 workers (fork) over the files: each item is open()ed, decoded
        with PIL, returned as a tensor
    torch.save of a small state dict to DIR/ckpt.pt, torch.load of it
    os.write(-1, b"MLPROF_MARK2")      (EBADF) the window ends

The parent waits for the child and prints the child's pid on stdout; it exits 1 if the
child failed.
"""
import os
import sys

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset


def mark(which):
    try:
        os.write(-1, which)
    except OSError:
        pass


class Folder(Dataset):
    def __init__(self, top):
        self.items = []
        for cls in sorted(os.listdir(top)):
            sub = os.path.join(top, cls)
            if not os.path.isdir(sub):
                continue
            for name in sorted(os.listdir(sub)):
                path = os.path.join(sub, name)
                if os.path.isfile(path):
                    self.items.append((path, int(cls[1:])))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, label = self.items[i]
        with open(path, "rb") as f:
            img = Image.open(f).convert("RGB")
        return torch.from_numpy(np.asarray(img).copy()), label


def window(top, ckpt):
    mark(b"MLPROF_MARK1")
    data = Folder(top)
    seen = 0
    for images, labels in DataLoader(data, batch_size=8, num_workers=2):
        seen += len(labels)
    assert seen == len(data), (seen, len(data))
    torch.save({"w": torch.zeros(64, 64), "step": seen}, ckpt)
    state = torch.load(ckpt)
    assert state["step"] == seen
    mark(b"MLPROF_MARK2")


def main():
    root, classes, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    top = os.path.join(root, "data")
    for k in range(classes):
        d = os.path.join(top, "c%d" % k)
        os.makedirs(d, exist_ok=True)
        for j in range(per):
            Image.new("RGB", (8, 8), (k, j, 0)).save(os.path.join(d, "img%d.png" % j))
    # Warm-up: every module, plugin and code path of the window used once.
    warm = os.path.join(root, "warm.pt")
    for images, labels in DataLoader(Folder(top), batch_size=8, num_workers=2):
        pass
    torch.save({"w": torch.zeros(64, 64), "step": 0}, warm)
    torch.load(warm)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            window(top, os.path.join(root, "ckpt.pt"))
        except BaseException as e:  # noqa: BLE001 - any failure is the child's exit status
            print("window failed: %r" % (e,), file=sys.stderr)
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(pid)
    sys.exit(0 if status == 0 else 1)


if __name__ == "__main__":
    main()

"""Calls made at known lines in the shapes a training script meets, for
`mlprof-collect --sites` (tests/tests/sites.rs): a directory scan, `open().read()`, and PIL
image opens in DataLoader workers started with fork and with spawn.

    sites_data.py DIR N
"""

import os
import sys

import torch
from PIL import Image


class Images(torch.utils.data.Dataset):
    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        with Image.open(self.paths[index]) as image:
            return torch.tensor(image.size)


def scan(folder):
    return sorted(entry.name for entry in os.scandir(folder))  # site: scandir


def read_all(paths):
    return [open(path, "rb").read() for path in paths]  # site: read


def main():
    folder, n = sys.argv[1], int(sys.argv[2])
    images = os.path.join(folder, "images")
    os.makedirs(images)
    paths = []
    for i in range(n):
        path = os.path.join(images, f"{i}.png")
        Image.new("RGB", (8, 8), (i, 0, 0)).save(path)
        paths.append(path)
    names = scan(images)
    blobs = read_all(paths)
    batches = 0
    for method in ("fork", "spawn"):
        loader = torch.utils.data.DataLoader(
            Images(paths), batch_size=2, num_workers=2, multiprocessing_context=method
        )
        batches += sum(1 for _ in loader)
    print(f"names={len(names)} bytes={sum(map(len, blobs))} batches={batches}")


if __name__ == "__main__":
    main()

"""A tiny training loop for `mlprof-collect --torch --steps A-B`: os.write calls at known
places: 5 before the loop (step 1 runs from the job's start), k in step k before its
optimizer.step(), and 7 after the loop.

usage: capture_steps.py STEPS
"""

import os
import sys

import torch


def writes(fd: int, n: int) -> None:
    for _ in range(n):
        os.write(fd, b"x")


def main() -> None:
    steps = int(sys.argv[1])
    fd = os.open(os.devnull, os.O_WRONLY)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randn(8, 4)
    writes(fd, 5)
    for step in range(1, steps + 1):
        writes(fd, step)
        loss = model(data).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    writes(fd, 7)


if __name__ == "__main__":
    main()

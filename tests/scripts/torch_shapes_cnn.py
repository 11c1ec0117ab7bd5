"""A small CNN for `mlprof-collect --torch-shapes` (tests/tests/torch_hook.rs): one convolution
(no bias) and a linear layer, 5 forward/backward steps on a [4,3,16,16] batch and 3 on a
[2,3,16,16] batch, so aten::conv2d runs with two known input configurations.

    torch_shapes_cnn.py
"""

import torch
from torch import nn


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 16 * 16, 2)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for batch, steps in ((4, 5), (2, 3)):
        x = torch.randn(batch, 3, 16, 16)
        y = torch.randint(0, 2, (batch,))
        for _ in range(steps):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    print("torch_shapes_cnn: done")


if __name__ == "__main__":
    main()

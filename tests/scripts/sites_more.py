"""More calls at known lines, for `mlprof-collect --sites` (tests/tests/sites.rs): a `glob`
loop, `torch.save`/`torch.load` of a checkpoint, and the same script `exec`ed into a new
interpreter image; each line marked `# site: NAME` makes a known number of calls.

    sites_more.py DIR N           # then execs itself as: sites_more.py --exec DIR N
"""

import glob
import os
import sys


def glob_loop(folder):
    for path in sorted(glob.glob(os.path.join(folder, "*.txt"))):
        os.stat(path)  # site: glob


def checkpoints(folder, n):
    import torch

    path = os.path.join(folder, "ckpt.pt")
    tensor = torch.zeros(4)
    for _ in range(n):
        torch.save(tensor, path)  # site: save
    for _ in range(n):
        torch.load(path)  # site: load


def after_exec(n):
    for _ in range(n):
        os.stat("/")  # site: exec


def main():
    if sys.argv[1] == "--exec":
        after_exec(int(sys.argv[3]))
        return
    folder, n = sys.argv[1], int(sys.argv[2])
    for i in range(n):
        with open(os.path.join(folder, f"{i}.txt"), "w"):
            pass
    glob_loop(folder)
    checkpoints(folder, n)
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, __file__, "--exec", folder, str(n)])


if __name__ == "__main__":
    main()

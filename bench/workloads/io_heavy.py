#!/usr/bin/env python3
"""Workload (c): many small file reads and one large torch.save.

Reads --reads small files (default 60k: three passes over 20k files of 1-4 KiB, generated
once into DATA_DIR/small/, 200 directories of 100, cached) with Python's open().read() in a
fixed shuffled order and checksums them; then torch.save's a --save-mb MB tensor to
DATA_DIR/out/big.pt and removes it. Deterministic.

    python bench/workloads/io_heavy.py DATA_DIR [--reads 60000] [--save-mb 200]
                                       [--scale X] [--torch-profile FILE]
"""

import os
import random
import sys
import time
import zlib

import _common

VERSION = "io-v1 files=20000 dirs=200 size=1-4KiB"
FILES, DIRS = 20000, 200


def file_path(root, i):
    return os.path.join(root, "small", f"d{i % DIRS:03d}", f"f{i:05d}.bin")


def prepare(root):
    marker = os.path.join(root, "small.ok")
    if _common.marker_ok(marker, VERSION):
        return
    rng = random.Random(1234)
    for d in range(DIRS):
        os.makedirs(os.path.join(root, "small", f"d{d:03d}"), exist_ok=True)
    for i in range(FILES):
        with open(file_path(root, i), "wb") as f:
            f.write(rng.randbytes(rng.randint(1024, 4096)))
    _common.write_marker(marker, VERSION)


def main():
    def extra(ap):
        ap.add_argument("--reads", type=int, default=60000)
        ap.add_argument("--save-mb", type=int, default=200)

    args = _common.parse(__doc__, extra)
    t_prep = time.monotonic()
    prepare(args.data_dir)
    if args.prepare:
        print(f"prepare_s={time.monotonic() - t_prep:.3f}")
        return 0
    import torch

    _common.setup_torch(args)
    order = list(range(FILES))
    random.Random(0).shuffle(order)
    reads = max(1, int(args.reads * args.scale))
    out_dir = os.path.join(args.data_dir, "out")
    os.makedirs(out_dir, exist_ok=True)
    big = os.path.join(out_dir, "big.pt")
    crc, nbytes = 0, 0
    t0 = time.monotonic()
    with _common.maybe_profiled(args.torch_profile) as step:
        for k in range(reads):
            with open(file_path(args.data_dir, order[k % FILES]), "rb") as f:
                data = f.read()
            crc = zlib.crc32(data, crc)
            nbytes += len(data)
            if k % 1000 == 999:
                step()
        t_read = time.monotonic() - t0
        t1 = time.monotonic()
        n = max(1, int(args.save_mb * args.scale)) * (1 << 20) // 4
        tensor = torch.arange(n, dtype=torch.float32)
        torch.save({"weights": tensor}, big)
        save_bytes = os.path.getsize(big)
        t_save = time.monotonic() - t1
        os.remove(big)
        step()
    loop_s = time.monotonic() - t0
    _common.report(
        workload="io_heavy",
        steps=reads,
        loop_s=f"{loop_s:.3f}",
        read_s=f"{t_read:.3f}",
        bytes_read=nbytes,
        crc=f"{crc:08x}",
        save_s=f"{t_save:.3f}",
        save_bytes=save_bytes,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A tiny DDP job for torchrun (gloo backend, CPU): a few steps of a linear model with an
explicit all_reduce per step, so every rank makes the same sequence of blocking collectives.
With `--workers N`, each rank's batches come from a DataLoader with N worker processes (forked
children that inherit the rank's environment).

Used by tests/tests/scale.rs: `torchrun --nproc_per_node=2 ddp_gloo.py --steps N`.
"""

import argparse
import atexit
import os
import sys

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--slow-rank", type=int, default=-1, help="this rank sleeps 20 ms per step")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes per rank")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(8 * args.steps, 16))
    loader = torch.utils.data.DataLoader(data, batch_size=8, num_workers=args.workers)
    for (x,) in loader:
        if rank == args.slow_rank:
            import time

            time.sleep(0.02)
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        t = torch.ones(4)
        dist.all_reduce(t)
    dist.barrier()
    print(f"rank {rank} of {dist.get_world_size()} local {os.environ.get('LOCAL_RANK')} done", flush=True)
    dist.destroy_process_group()
    # Leave without the interpreter's finalization, after the exit handlers (mlprof's --torch
    # hook has one): gloo's threads sometimes abort the process there ("terminate called
    # without an active exception", SIGABRT after this script's work is done) — 5 of 45 runs of
    # two torchrun nodes with no profiler at all, and the two-node test with it now and then.
    sys.stdout.flush()
    atexit._run_exitfuncs()
    os._exit(0)


if __name__ == "__main__":
    main()

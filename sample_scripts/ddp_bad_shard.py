"""Distributed data parallel on the CPU (gloo): one rank's data shard holds a NaN batch.

Launch with torchrun (2 processes):
    torchrun --nproc-per-node 2 -m neuraldbg_cli run --trace run.jsonl sample_scripts/ddp_bad_shard.py
    neuraldbg explain run.rank0.jsonl run.rank1.jsonl

At --bad-step (default 12) rank --bad-rank (default 1) gets a batch with NaN. Its input goes
non-finite there; the gradient all-reduce then carries the NaN to every rank, whose weights,
and so activations, turn non-finite from the next step on. Without --bad-step < 0 the run is
healthy. Under `neuraldbg run --stop-on nonfinite` both ranks stop at --bad-step, before
its update: the all-reduced gradient is non-finite on every rank.
"""
import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--bad-step", type=int, default=12, help="negative: a healthy run")
    parser.add_argument("--bad-rank", type=int, default=1)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                              nn.Linear(32, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + rank)       # each rank its own shard
    try:
        for step in range(args.steps):
            x = torch.randn(32, 16, generator=gen)
            y = torch.randint(0, 4, (32,), generator=gen)
            if step == args.bad_step and rank == args.bad_rank:
                x[5, 3] = float("nan")
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            print(f"final loss {loss.item():.4f}")
        dist.barrier()  # both ranks done before teardown: gloo can abort if one leaves early
    finally:            # (also when stopped: `neuraldbg run --stop-on` raises in opt.step())
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

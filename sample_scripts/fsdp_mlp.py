"""FSDP2 (`fully_shard`) on the CPU (gloo): a healthy MLP regression, its parameters sharded.

Launch with torchrun (2 processes), or plainly for the same run unsharded:
    torchrun --nproc-per-node 2 -m neuraldbg_cli run --trace run.jsonl sample_scripts/fsdp_mlp.py
    neuraldbg run --trace one.jsonl sample_scripts/fsdp_mlp.py

Every Linear is sharded on its own (the last, Linear(32, 1), unevenly: its one row lives on
rank 0, rank 1's shard is empty). Each step draws one batch of --batch rows from one seed;
each rank trains on its slice of it. FSDP2 averages the ranks' gradients, so the gradients,
and so the whole run, are those of the unsharded run on the whole batch: rank by rank, the
layers' gradient norms are parts of the unsharded run's.
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=128, help="rows a step, all ranks together")
    args = parser.parse_args()

    sharded = "RANK" in os.environ         # launched by torchrun
    rank, world = 0, 1
    if sharded:
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                          nn.Linear(32, 1))
    if sharded:
        from torch.distributed.fsdp import fully_shard
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(100)        # the same batches in every run
    rows = slice(rank * args.batch // world, (rank + 1) * args.batch // world)
    for step in range(args.steps):
        x = torch.randn(args.batch, 16, generator=gen)
        y = x[:, :1] - 0.5 * x[:, 1:2] + 0.1 * torch.randn(args.batch, 1, generator=gen)
        loss = nn.functional.mse_loss(model(x[rows]), y[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and step % 5 == 0:
            print(f"step {step} loss {loss.item():.5f}")
    # the parameters as a checksum, gathered (the script may gather: neuraldbg never does)
    total = sum(float((p.full_tensor() if sharded else p).detach().sum())
                for p in model.parameters())
    if rank == 0:
        print(f"param-sum {total:.5f}")
    if sharded:
        dist.barrier()      # both ranks done before teardown: gloo can abort if one leaves early
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

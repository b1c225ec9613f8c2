"""A loss summed over every token: float16 gradients overflow even unscaled, and the
GradScaler skips step after step while its scale sinks below 1.

Fault shown: a per-token regression (one target vector per position of each sequence, as a
speech or time-series model has) is trained under `torch.autocast(dtype=torch.float16)`
with a GradScaler, on `F.mse_loss(..., reduction="sum")`. A layer's weight gradient sums
over every position of every sequence: 256 sequences of 256 positions make 65536 terms, and
the sum passes float16's largest value, 65504, even with the loss unscaled. The scaler sees
inf in the gradients, skips the step and halves its scale: from 65536 it falls below 1
within 20 steps, where no loss scale can help. (In float32 the same loss trains: Adam
divides the gradient's size out.)

Expected detection under `neuraldbg run`: `(scaler)`, signal `scaler`, `normal -> collapsed`
within 25 steps, cause `precision`, naming the layer whose gradients overflowed first. With
`--fixed` (`reduction="mean"`, nothing else changed) the run stays healthy.

    python sample_scripts/scaler_skipping.py [--fixed] [--steps 40] [--device cpu]
    neuraldbg run --fail-on collapsed sample_scripts/scaler_skipping.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--device", default="cpu")
parser.add_argument("--fixed", action="store_true", help='reduction="mean"')
args = parser.parse_args()

torch.manual_seed(0)
device = torch.device(args.device)
features = 8
model = nn.Sequential(nn.Linear(features, 32), nn.ReLU(), nn.Linear(32, features)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler(device.type)
reduction = "mean" if args.fixed else "sum"

x = torch.randn(256, 256, features, device=device)          # (sequences, positions, features)
y = 4 * torch.tanh(x @ torch.randn(features, features, device=device))

for step in range(args.steps):
    with torch.autocast(device.type, dtype=torch.float16):
        loss = nn.functional.mse_loss(model(x).float(), y, reduction=reduction)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    if step % 10 == 0 or step == args.steps - 1:
        print(f"step {step:3d}  loss {loss.item():.4g}  scale {scaler.get_scale():.3g}")

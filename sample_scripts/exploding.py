"""Exploding gradients: a learning-rate warm-up to a peak that is too high, no clipping.

Fault shown: a tanh MLP regression trained with SGD and a linear warm-up (LambdaLR) towards a
peak learning rate of 1.0, a value copied from a recipe for a much larger batch, and no
`clip_grad_norm_`. The first steps train well; once the learning rate passes the stability
limit, each update overshoots and the output layer's error grows by a factor every step, so
the gradients grow geometrically (orders of magnitude within a few steps) until they overflow
to inf/NaN about ten steps later.

Expected detection under `neuraldbg run`: the Linear layers `2` and `4`, signal `gradient`,
`healthy -> exploding` around step 30 (norm 100x its recent median, then above 1e3), `0` a
step later; the tanh layers then saturate, and the gradients turn `nonfinite` some ten steps
after the onset.

    python sample_scripts/exploding.py [--peak-lr 1.0] [--warmup 100] [--steps 50]
    neuraldbg run sample_scripts/exploding.py
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=50)
parser.add_argument("--peak-lr", type=float, default=1.0)
parser.add_argument("--warmup", type=int, default=100, help="warm-up length in steps")
args = parser.parse_args()

torch.manual_seed(0)

n_features = 8
X = torch.randn(2048, n_features)
y = X @ torch.randn(n_features, 1)

model = nn.Sequential(
    nn.Linear(n_features, 64),
    nn.Tanh(),
    nn.Linear(64, 64),
    nn.Tanh(),
    nn.Linear(64, 1),
)
optimizer = torch.optim.SGD(model.parameters(), lr=args.peak_lr)
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda step: min(1.0, (step + 1) / args.warmup))
loss_fn = nn.MSELoss()

for step in range(args.steps):
    idx = torch.randint(0, len(X), (64,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()            # no torch.nn.utils.clip_grad_norm_ here
    optimizer.step()
    scheduler.step()

print(f"exploding: {args.steps} steps, final loss {loss.item():.4g}, "
      f"lr {scheduler.get_last_lr()[0]:.2f}")

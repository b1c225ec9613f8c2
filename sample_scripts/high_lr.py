"""Dying ReLUs under a constant learning rate that is simply too high.

Fault shown: a ReLU MLP regresses a target from non-negative features with SGD + momentum
at a constant learning rate of 0.08, 8x the rate it trains well with (0.01). No schedule,
no change: the rate is too high from the first step. Each oversized step pushes a few more
hidden units' pre-activations below zero for every input; a unit that outputs zero for every
input gets no gradient and never comes back, so the units die one after another over the
first ~70 steps until the ReLUs `3` and `1` are dead (>90% of their units) and the loss
stops improving.

Expected detection under `neuraldbg run`: the `hparams` event at step 0 shows the one learning
rate (0.08, never changed); the loss spikes and the output layer `4` takes `too_large`
updates from step ~23; then the second ReLU, `3` (step ~63), and the first, `1` (step ~69),
go `activation: normal -> dead`, and the Linear layers before them, `0` and `2`, show
`gradient: vanishing` once nothing flows through. With `--fixed` (lr 0.01, nothing else
changed) the run stays healthy.

    python sample_scripts/high_lr.py [--fixed] [--lr 0.08] [--steps 200]
    neuraldbg run --fail-on dead sample_scripts/high_lr.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--lr", type=float, default=0.08, help="the (too high) learning rate")
parser.add_argument("--fixed", action="store_true", help="use a sane learning rate (0.01)")
args = parser.parse_args()
lr = 0.01 if args.fixed else args.lr

torch.manual_seed(0)

# Synthetic regression on non-negative features.
n_features = 32
X = torch.rand(2048, n_features)
w = torch.randn(n_features, 1)
y = X @ w + 0.5 * torch.sin(4 * X[:, :1])

model = nn.Sequential(
    nn.Linear(n_features, 64),
    nn.ReLU(),
    nn.Linear(64, 64),
    nn.ReLU(),
    nn.Linear(64, 1),
)
optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
loss_fn = nn.MSELoss()

batch = 64
for step in range(args.steps):
    idx = torch.randint(0, len(X), (batch,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    h1 = model[1](model[0](X))
    h3 = model[3](model[2](h1))
    dead1 = (h1.amax(dim=0) <= 0).float().mean().item()
    dead3 = (h3.amax(dim=0) <= 0).float().mean().item()
    final = loss_fn(model(X), y).item()
print(f"high_lr: lr {lr}, {args.steps} steps, loss on all data {final:.4f}, "
      f"dead units: layer 1 {dead1:.0%}, layer 3 {dead3:.0%}")

"""Dying ReLU after a learning-rate increase.

Fault shown: a ReLU MLP regresses a target from non-negative features (think pixel
intensities) with SGD + momentum at a sane learning rate (0.01). At step 40 the learning rate
is raised 200x to 2.0 through `optimizer.param_groups` (a warm-up whose target was typed as
2.0 instead of 0.02). The next few updates are huge; they push the first hidden layer's
pre-activations below zero for every input, its ReLU (`1`) then outputs zero for all units,
and a unit that outputs zero for every input gets no gradient: it never comes back.

Expected detection under `neuraldbg run`: an `hparams` event at step 40 with the new lr, then
layer `1` (ReLU), signal `activation`, `normal -> dead` a few steps after 40 (the second
ReLU, `3`, dies too). With `--lr-after 0.01` (no increase) the run stays healthy.

    python sample_scripts/dying_relu.py [--lr 0.01] [--lr-after 2.0] [--boost-step 40] [--steps 80]
    neuraldbg run --fail-on dead sample_scripts/dying_relu.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=80)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--lr-after", type=float, default=2.0,
                    help="learning rate from --boost-step on")
parser.add_argument("--boost-step", type=int, default=40)
args = parser.parse_args()

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
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
loss_fn = nn.SmoothL1Loss()

batch = 64
for step in range(args.steps):
    if step == args.boost_step:
        for group in optimizer.param_groups:
            group["lr"] = args.lr_after
    idx = torch.randint(0, len(X), (batch,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step == args.boost_step - 1:
        print(f"step {step}: loss {loss.item():.4f}, lr {args.lr} -> {args.lr_after}")

with torch.no_grad():
    hidden = model[1](model[0](X))
    dead = (hidden.amax(dim=0) <= 0).float().mean().item()
print(f"dying_relu: {args.steps} steps, final loss {loss.item():.4f}, "
      f"dead units in layer 1: {dead:.0%}")

"""Dying ReLUs well after a learning-rate schedule raises the rate 5x.

Fault shown: a ReLU MLP regresses a target from non-negative features with SGD + momentum
(lr 0.012, healthy). Its `LambdaLR` schedule was meant to be a flat "stage two" from step 100
on, but its factor was typed as 5.0: from step 100 the learning rate is 0.06. Nothing breaks
at once. The larger steps make the training oscillate; the oscillation builds up over a few
dozen steps until the updates push the second hidden layer's pre-activations below zero for
every input: its ReLU (`3`) dies around step 146, more than 40 steps after the rise, and
never comes back (a unit that outputs zero for every input gets no gradient).

Expected detection under `neuraldbg run`: an `hparams` event at step 100 (lr 0.012 -> 0.06);
soon after, the loss spiking and `too_large` updates in the Linear layers (step ~102); then
layer `3` (ReLU), signal `activation`, `normal -> dead` at step ~146, well over 20 steps
after the rise, and the Linear layers `0` and `2` with a vanishing gradient. With `--fixed`
(factor 1.0: no rise, nothing else changed) the run stays healthy.

    python sample_scripts/lr_schedule_rise.py [--fixed] [--factor 5.0] [--rise-step 100]
    neuraldbg run --fail-on dead sample_scripts/lr_schedule_rise.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=250)
parser.add_argument("--lr", type=float, default=0.012)
parser.add_argument("--factor", type=float, default=5.0,
                    help="the schedule's learning-rate factor from --rise-step on")
parser.add_argument("--rise-step", type=int, default=100)
parser.add_argument("--fixed", action="store_true", help="factor 1.0: the schedule does not rise")
args = parser.parse_args()
factor = 1.0 if args.fixed else args.factor

torch.manual_seed(1)

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
schedule = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda step: 1.0 if step < args.rise_step else factor)
loss_fn = nn.MSELoss()

batch = 256
for step in range(args.steps):
    idx = torch.randint(0, len(X), (batch,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    schedule.step()
    if step == args.rise_step - 1:
        print(f"step {step}: loss {loss.item():.4f}, lr {args.lr} -> {args.lr * factor:g}")

with torch.no_grad():
    h1 = model[1](model[0](X))
    h3 = model[3](model[2](h1))
    dead1 = (h1.amax(dim=0) <= 0).float().mean().item()
    dead3 = (h3.amax(dim=0) <= 0).float().mean().item()
    final = loss_fn(model(X), y).item()
print(f"lr_schedule_rise: factor {factor:g} from step {args.rise_step}, {args.steps} steps, "
      f"loss on all data {final:.4f}, dead units: layer 1 {dead1:.0%}, layer 3 {dead3:.0%}")

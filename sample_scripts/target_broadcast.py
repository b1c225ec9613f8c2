"""Targets of shape (N,) against outputs of shape (N, 1): the MSE broadcasts to (N, N).

Fault shown: a ReLU regressor ends in `nn.Linear(64, 1)`, so its output has shape (N, 1),
while the targets were built as a flat vector of shape (N,). `F.mse_loss(out, y)` broadcasts
the two to (N, N) and averages every output against every target of the batch: the loss is
minimised by predicting the batch mean for every row, whatever the input. torch warns once
("Using a target size ... that is different to the input size"), a line easy to miss in a
log; the loss falls a little, then sits at the variance of the targets, and the model
learns nothing about the inputs.

Expected detection under `neuraldbg run`: the pseudo-layer `(output)`, signal `output`,
`null -> mismatched` at step 0, cause `architecture`. With `--fixed` (the targets given
their column shape, `y.unsqueeze(1)`, nothing else changed) the run stays healthy.

    python sample_scripts/target_broadcast.py [--fixed] [--steps 200]
    neuraldbg run --fail-on mismatched sample_scripts/target_broadcast.py     # exits 3
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--fixed", action="store_true", help="targets of shape (N, 1)")
args = parser.parse_args()

torch.manual_seed(0)

n_features = 10
X = torch.randn(2048, n_features)
y = X @ torch.randn(n_features) / n_features ** 0.5 + 0.1 * torch.randn(2048)   # shape (N,)
if args.fixed:
    y = y.unsqueeze(1)

model = nn.Sequential(
    nn.Linear(n_features, 64),
    nn.ReLU(),
    nn.Linear(64, 64),
    nn.ReLU(),
    nn.Linear(64, 1),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

batch = 64
for step in range(args.steps):
    idx = torch.randint(0, len(X), (batch,))
    loss = F.mse_loss(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    pred = model(X).squeeze(1)
    target = y.reshape(-1)
    mse = (pred - target).pow(2).mean().item()
print(f"target_broadcast: targets of shape {'(N, 1)' if args.fixed else '(N,)'}, "
      f"{args.steps} steps, final loss {loss.item():.4f}, true MSE {mse:.4f} "
      f"(target variance {target.var().item():.4f}), prediction std {pred.std().item():.4f}")

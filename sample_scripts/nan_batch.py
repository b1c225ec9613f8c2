"""One corrupted batch: a NaN in the input data at a fixed step.

Fault shown: a healthy MLP classifier trains on a feature matrix in which one sample has a
missing value stored as NaN (as `pandas` or `numpy.genfromtxt` produce for an empty CSV
cell). The batch that contains it, at step 30, makes the loss NaN; the backward pass writes
NaN gradients, `optimizer.step()` writes NaN into every weight, and from then on every layer
outputs NaN.

Expected detection under `neuraldbg run`: the pseudo-layer `(input)`, signal `activation`,
`normal -> nonfinite` at step 30 (reported at once, no debounce), and every layer's activation
and gradient `-> nonfinite` at step 30 too; `(input)` returns to `normal` at step 31 (the
next batches are clean) while the layers stay non-finite.

    python sample_scripts/nan_batch.py [--bad-step 30] [--steps N]
    neuraldbg run sample_scripts/nan_batch.py
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=50)
parser.add_argument("--bad-step", type=int, default=30, help="the step whose batch holds the NaN")
args = parser.parse_args()

torch.manual_seed(0)

n_features, n_classes, batch = 20, 4, 64
X = torch.randn(4096, n_features)
y = (X @ torch.randn(n_features, n_classes)).argmax(dim=1)
# Sequential batches, no shuffling (less than one epoch): batch k is rows [64k, 64k + 64).
X[args.bad_step * batch + 7, 3] = float("nan")          # a missing value

model = nn.Sequential(
    nn.Linear(n_features, 64),
    nn.ReLU(),
    nn.Linear(64, 64),
    nn.ReLU(),
    nn.Linear(64, n_classes),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()

losses = []
for step in range(args.steps):
    start = (step * batch) % len(X)
    xb, yb = X[start:start + batch], y[start:start + batch]
    loss = loss_fn(model(xb), yb)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())

first_nan = next((i for i, v in enumerate(losses) if v != v), None)
print(f"nan_batch: {args.steps} steps, final loss {losses[-1]:.4f}, "
      f"first NaN loss at step {first_nan}")

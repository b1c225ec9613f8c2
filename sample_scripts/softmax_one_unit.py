"""A binary classifier with one output unit behind a softmax: the output is always 1.0.

Fault shown: a ReLU MLP ends in `nn.Linear(64, 1)` followed by `nn.Softmax(dim=1)` and is
trained with `nn.BCELoss()` on 0/1 targets of shape (N, 1), a sigmoid swapped for a softmax
as one would for several classes. A softmax over a single unit divides that unit by itself:
the output is exactly 1.0 for every input, its gradient with respect to the logit is exactly
zero, so no layer ever gets a gradient. The loss (BCE of 1.0 against the negatives, clamped
by torch at 100 per example) sits at the same value from the first step to the last.

Expected detection under `neuraldbg run`: the pseudo-layer `(output)`, signal `output`,
`null -> constant` at step 0, cause `architecture`. With `--fixed` (`nn.Sigmoid()` instead
of the softmax, nothing else changed) the run stays healthy.

    python sample_scripts/softmax_one_unit.py [--fixed] [--steps 200]
    neuraldbg run --fail-on constant sample_scripts/softmax_one_unit.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--fixed", action="store_true", help="end the model in nn.Sigmoid()")
args = parser.parse_args()

torch.manual_seed(0)

n_features = 20
X = torch.randn(2048, n_features)
y = (X @ torch.randn(n_features, 1) > 0).float()       # 0/1 targets, shape (N, 1)

model = nn.Sequential(
    nn.Linear(n_features, 64),
    nn.ReLU(),
    nn.Linear(64, 64),
    nn.ReLU(),
    nn.Linear(64, 1),
    nn.Sigmoid() if args.fixed else nn.Softmax(dim=1),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.BCELoss()

with torch.no_grad():
    first = loss_fn(model(X), y).item()
batch = 64
for step in range(args.steps):
    idx = torch.randint(0, len(X), (batch,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    out = model(X)
    final = loss_fn(out, y).item()
    accuracy = ((out > 0.5).float() == y).float().mean().item()
print(f"softmax_one_unit: output {'sigmoid' if args.fixed else 'softmax over 1 unit'}, "
      f"{args.steps} steps, loss on all data {first:.4f} -> {final:.4f}, "
      f"accuracy {accuracy:.3f}, outputs in [{out.min().item():.3g}, {out.max().item():.3g}]")

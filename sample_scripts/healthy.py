"""A healthy run: an MLP classifier on synthetic data that trains fine.

Fault shown: none. Under `neuraldbg run` every layer should be observed as `normal`
(activations) and `healthy` (gradients) from step 0 to the end: the trace holds only
`null -> normal` / `null -> healthy` transitions at step 0 and no failure state at all, and
`--fail-on dead` (or any other state) exits 0.

    python sample_scripts/healthy.py [--steps N]
    neuraldbg run sample_scripts/healthy.py
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=150)
parser.add_argument("--lr", type=float, default=0.05)
args = parser.parse_args()

torch.manual_seed(0)

# Synthetic 4-class problem: labels from a fixed random linear teacher.
n_features, n_classes = 20, 4
X = torch.randn(1024, n_features)
teacher = torch.randn(n_features, n_classes)
y = (X @ teacher).argmax(dim=1)

model = nn.Sequential(
    nn.Linear(n_features, 64),
    nn.ReLU(),
    nn.Linear(64, 64),
    nn.ReLU(),
    nn.Linear(64, n_classes),
)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()

batch = 64
for step in range(args.steps):
    idx = torch.randint(0, len(X), (batch,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    acc = (model(X).argmax(dim=1) == y).float().mean().item()
print(f"healthy: {args.steps} steps, final loss {loss.item():.4f}, accuracy {acc:.3f}")

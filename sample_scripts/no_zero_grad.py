"""Gradients never reset: `optimizer.zero_grad()` is missing from the training loop.

Fault shown: a ReLU MLP classifier is trained with SGD + momentum, but the loop calls
`loss.backward()` and `optimizer.step()` without ever calling `optimizer.zero_grad()`.
backward() adds to `.grad`, so at step k each parameter's gradient is the sum of the k
gradients so far: the gradient norms grow step after step, the updates with them, and the
optimizer keeps pushing along old directions. The loss goes down at first, then oscillates
ever more widely instead of converging.

Expected detection under `neuraldbg run`: the pseudo-layer `(loop)`, signal `loop`,
`normal -> no_zero_grad` within the first few steps (dated at the first optimizer step that
followed a step without a reset); later the loss and the gradients show the consequences.
With `--fixed` (`optimizer.zero_grad()` before each backward, nothing else changed) the run
stays healthy.

    python sample_scripts/no_zero_grad.py [--fixed] [--steps 150]
    neuraldbg run --fail-on no_zero_grad sample_scripts/no_zero_grad.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=150)
parser.add_argument("--fixed", action="store_true", help="call optimizer.zero_grad() each step")
args = parser.parse_args()

torch.manual_seed(0)

n_features, n_classes = 20, 4
X = torch.randn(2048, n_features)
y = (X @ torch.randn(n_features, n_classes)).argmax(dim=1)

model = nn.Sequential(
    nn.Linear(n_features, 64),
    nn.ReLU(),
    nn.Linear(64, 64),
    nn.ReLU(),
    nn.Linear(64, n_classes),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()

batch = 64
grad_norms = []
for step in range(args.steps):
    idx = torch.randint(0, len(X), (batch,))
    loss = loss_fn(model(X[idx]), y[idx])
    if args.fixed:
        optimizer.zero_grad()
    loss.backward()                 # (without zero_grad: adds to the gradients of every step so far)
    grad_norms.append(model[0].weight.grad.norm().item())
    optimizer.step()

with torch.no_grad():
    accuracy = (model(X).argmax(dim=1) == y).float().mean().item()
print(f"no_zero_grad: zero_grad {'each step' if args.fixed else 'never'}, {args.steps} steps, "
      f"final loss {loss.item():.4f}, accuracy {accuracy:.3f}, first-layer gradient norm "
      f"{grad_norms[0]:.3g} -> {grad_norms[-1]:.3g}")

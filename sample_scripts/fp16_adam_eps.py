"""A model made .half() and trained with Adam's default eps: 1e-8 is 0 in float16, and the
first step divides by zero.

Fault shown: the weights, and so Adam's state, are float16 (`model.half()`, a shortcut to
"mixed precision" seen on the forums). Adam's step is m / (sqrt(v) + eps), computed in the
weights' precision. float16's smallest value is 6e-8: eps = 1e-8 is 0 there, and v, the
running mean square of the gradient scaled by (1 - beta2) = 0.001, underflows to 0 for
any gradient under about 5e-3. The step is then m / 0, inf, and every weight it touches is
inf or NaN after the first step. In float32 the same step is finite.

Expected detection under `neuraldbg run`: every layer `nonfinite` from step 1 (step 0 is
finite: the forward pass before the first update), cause `precision`, the evidence naming
Adam's eps of 1e-8 in float16. With `--fixed` (eps 1e-4, which float16 holds, as answered
on the PyTorch forum; keeping the weights in float32 under `torch.autocast` is the better
fix) the run stays healthy.

    python sample_scripts/fp16_adam_eps.py [--fixed] [--steps 60]
    neuraldbg run --fail-on nonfinite sample_scripts/fp16_adam_eps.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--fixed", action="store_true", help="Adam's eps 1e-4")
args = parser.parse_args()

torch.manual_seed(0)
X = torch.randn(2048, 32)
y = (X[:, :4].sum(1) > 0).long()
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                      nn.Linear(64, 2)).half()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-4 if args.fixed else 1e-8)
loss_fn = nn.CrossEntropyLoss()

for step in range(args.steps):
    i = torch.randint(0, len(X), (128,))
    loss = loss_fn(model(X[i].half()).float(), y[i])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    accuracy = (model(X.half()).argmax(1) == y).float().mean().item()
print(f"fp16_adam_eps: eps {optimizer.param_groups[0]['eps']:g}, last loss {loss.item():.4f}, "
      f"accuracy {accuracy:.3f}")

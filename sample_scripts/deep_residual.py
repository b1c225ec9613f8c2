"""A deep residual MLP whose residual stream grows geometrically with depth.

Fault shown: 40 blocks `x + f(x)`, each branch f = Linear-ReLU-Linear, no normalisation,
every Linear He-initialised (std sqrt(2 / fan_in)): right for a plain ReLU MLP, where it
keeps the scale from layer to layer, but in a residual branch it makes f(x) ~1.4x as large
as x, so each block multiplies the stream by ~1.7 and 40 of them by ~1e9. The loss at the
first step is ~1e19, the first update throws every weight to inf, and from step 1 on all is
NaN. What the layers show (the output layer's gradient exploding, then NaN everywhere) is
the consequence; the origin is the growth along the blocks, from the first.

Expected detection under `neuraldbg run`: `blocks.0` ... `blocks.39` go `residual: null ->
exploding` at step 0 (the stream grows ~x1.7 per block from `blocks.0`), ahead of the
gradients exploding and the NaN; `explain` names `blocks.0`, cause `initialization`. With
`--fixed` (the last Linear of each branch zero-initialised, so each block starts as the
identity and its branch grows as it learns; nothing else changed) the run stays healthy.

    python sample_scripts/deep_residual.py [--fixed] [--steps 60] [--depth 40]
    neuraldbg run --fail-on exploding sample_scripts/deep_residual.py     # exits 3
"""
import argparse
import math

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--depth", type=int, default=40)
parser.add_argument("--fixed", action="store_true",
                    help="zero-initialise the last Linear of each residual branch")
args = parser.parse_args()

torch.manual_seed(0)
width = 64


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))

    def forward(self, x):
        return x + self.f(x)


class ResidualMLP(nn.Module):
    def __init__(self, n_in: int, depth: int):
        super().__init__()
        self.inp = nn.Linear(n_in, width)
        self.blocks = nn.Sequential(*[Block() for _ in range(depth)])
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        return self.head(self.blocks(self.inp(x)))


X = torch.randn(2048, 16)
y = torch.sin(X[:, :1]) + 0.1 * X[:, 1:2]
model = ResidualMLP(16, args.depth)
for m in model.modules():
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, std=math.sqrt(2 / m.in_features))     # He, as for a plain MLP
        nn.init.zeros_(m.bias)
if args.fixed:
    for block in model.blocks:
        nn.init.zeros_(block.f[2].weight)   # each block starts as the identity
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.MSELoss()

for step in range(args.steps):
    idx = torch.randint(0, len(X), (64,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    final = loss_fn(model(X), y).item()
print(f"deep_residual: {args.depth} blocks, {'zero-init branches' if args.fixed else 'He init'}, "
      f"{args.steps} steps, loss on all data {final:.4g}")

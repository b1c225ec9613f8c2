"""Vanishing gradients in a deep sigmoid MLP.

Fault shown: a 20-layer MLP with sigmoid activations, no normalisation and no residual
connections. Each sigmoid scales the backward signal by at most 0.25 and the default init
shrinks it further, so the gradient reaching the first layers is many orders of magnitude
smaller than at the last ones: the first layers do not learn.

Expected detection under `neuraldbg run`: the first Linear layers (`0`, `2`, ...), signal
`gradient`, `null -> vanishing` at step 0 (their gradient norm is below 1e-5 of the model's
largest layer norm), while the last layers are `healthy`.

    python sample_scripts/vanishing_sigmoid.py [--depth 20] [--steps N]
    neuraldbg run sample_scripts/vanishing_sigmoid.py
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--depth", type=int, default=20, help="number of hidden layers")
parser.add_argument("--width", type=int, default=32)
parser.add_argument("--steps", type=int, default=40)
args = parser.parse_args()

torch.manual_seed(0)

n_features, n_classes = 16, 2
X = torch.randn(1024, n_features)
y = (X[:, 0] * X[:, 1] > 0).long()

layers = []
width_in = n_features
for _ in range(args.depth):
    layers += [nn.Linear(width_in, args.width), nn.Sigmoid()]
    width_in = args.width
layers.append(nn.Linear(width_in, n_classes))
model = nn.Sequential(*layers)

optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss_fn = nn.CrossEntropyLoss()

for step in range(args.steps):
    idx = torch.randint(0, len(X), (64,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

first, last = model[0].weight.grad.norm().item(), model[-1].weight.grad.norm().item()
print(f"vanishing_sigmoid: {args.steps} steps, final loss {loss.item():.4f}, "
      f"grad norm first/last layer {first:.1e}/{last:.1e}")

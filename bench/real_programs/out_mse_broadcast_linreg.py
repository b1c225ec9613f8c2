"""A one-layer linear regression whose (N, 1) output is compared with an (N,) target: MSE broadcasts.

Source: https://github.com/pytorch/pytorch/issues/16045  (GitHub issue with a complete reproduction)
Bug: `nn.Linear(2, 1)` returns predictions of shape (100, 1) while `y` has shape (100,); `nn.MSELoss`
broadcasts them to a (100, 100) matrix, so every prediction is pulled towards the mean of all targets
and the convex problem never reaches its optimum (y = 10 + 9*x0 - 2*x1 + noise).
Fix (--fixed): `y = y.reshape(sample_size, 1)`, the line the reporter had commented out.
Printed metric (plain python): buggy final loss 63.5 (weights [0.002, -0.003]); fixed final loss 0.94
(weights [8.99, -1.84], bias 10).
"""
# expect: cause=architecture

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--fixed", action="store_true", help="reshape y to (N, 1)")
args = parser.parse_args()

torch.manual_seed(0)

# Set up straightforward linear regression problem (as in the issue).
sample_size = 100
x = torch.randn((sample_size, 2))
eps = torch.randn(sample_size)
y = 10 + 9 * x[:, 0] - 2 * x[:, 1] + eps
if args.fixed:
    y = y.reshape(sample_size, 1)
model = nn.Linear(2, 1)

optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss_func = nn.MSELoss()
for _ in range(args.steps):
    optimizer.zero_grad()
    yhat = model(x)
    loss_val = loss_func(yhat, y)
    loss_val.backward()
    optimizer.step()

w = model.weight.data.flatten().tolist()
print(f"mse_broadcast_linreg: final loss {loss_val.item():.4g}, weight [{w[0]:.3g}, {w[1]:.3g}], "
      f"bias {model.bias.item():.3g}")

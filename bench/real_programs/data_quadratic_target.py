"""Two stacked linear Dense(1) layers fitted with SGD to y = x**2 + 3 on raw targets up to ~9800: it diverges.

Source: https://stats.stackexchange.com/questions/418955/why-is-deep-neural-net-with-linear-activation-diverges
(Cross Validated question; the asker's update names the cause)
Bug: the input x = 0..99 is standardised but the target y = x**2 + 3 (3 to 9804) is fed raw to
Dense(1) -> Dense(1) trained with Keras 'sgd' (lr 0.01) and MSE; the squared errors in the tens of millions
give gradients that blow the two-weight product up and the loss goes to inf/nan.
Fix (--fixed): scale the target too (standardise y, map the predictions back), as the update concludes.
Printed metric (plain python): buggy MSE on y nan (diverged by step 3);
fixed MSE on y 5.6e+05 (var(y) 8.7e+06; best a linear fit can do).
"""
# expect: cause=input_data
import argparse
import math

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--fixed", action="store_true", help="standardise the target as well")
args = parser.parse_args()

torch.manual_seed(0)

x = torch.arange(100.0).unsqueeze(1)                 # np.arange(100)[:, np.newaxis]
y = x ** 2 + 3
x_normed = (x - x.mean()) / x.std(unbiased=False)    # (x - x.mean()) / x.std()

if args.fixed:
    y_mean, y_std = y.mean(), y.std(unbiased=False)
else:
    y_mean, y_std = torch.tensor(0.0), torch.tensor(1.0)
y_in = (y - y_mean) / y_std


def dense(n_in, n_out):
    # Keras Dense default: glorot_uniform kernel, zero bias
    layer = nn.Linear(n_in, n_out)
    limit = math.sqrt(6.0 / (n_in + n_out))
    nn.init.uniform_(layer.weight, -limit, limit)
    nn.init.zeros_(layer.bias)
    return layer


model = nn.Sequential(dense(1, 1), dense(1, 1))      # Dense(1, activation=None) twice
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)   # Keras 'sgd'

batch = 32                                           # Keras fit default, shuffled each epoch
n = len(x)
step = 0
while step < args.steps:
    perm = torch.randperm(n)
    for start in range(0, n, batch):
        if step >= args.steps:
            break
        idx = perm[start:start + batch]
        loss = ((model(x_normed[idx]) - y_in[idx]) ** 2).mean()   # loss='mse'
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1

with torch.no_grad():
    pred = model(x_normed) * y_std + y_mean
    mse = ((pred - y) ** 2).mean().item()
setup = "standardised target" if args.fixed else "raw target"
print(f"data_quadratic_target: {setup}, {args.steps} steps, MSE on y {mse:.4g} "
      f"(var(y) {y.var(unbiased=False).item():.4g})")

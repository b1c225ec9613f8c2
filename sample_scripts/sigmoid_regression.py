"""A regression model that ends in a sigmoid: it can never predict a price above 1.

Fault shown: a ReLU MLP predicts house prices (in thousands, about 40 to 3800) from four
standardised features, but its last layer is followed by `nn.Sigmoid()`, kept from a
classifier it was copied from, and it is trained with `nn.MSELoss()` on the raw prices.
Every prediction lies in (0, 1) while every target is above 40: the best the model can do is
push the sigmoid to 1, where its gradient vanishes, and the loss stays near the mean squared
price (in the millions) however long it trains.

Expected detection under `neuraldbg run`: the pseudo-layer `(output)`, signal `output`,
`null -> unreachable` at step 0, cause `architecture`. With `--fixed` (a linear output, no
sigmoid, and the prices standardised for the loss, nothing else changed) the run stays
healthy.

    python sample_scripts/sigmoid_regression.py [--fixed] [--steps 200]
    neuraldbg run --fail-on unreachable sample_scripts/sigmoid_regression.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--fixed", action="store_true",
                    help="a linear output trained on standardised prices")
args = parser.parse_args()

torch.manual_seed(0)

# A house's price (in thousands): its area times a price per m^2 that falls with the
# distance to the centre and with age, plus 5% noise; about 40 to 3800.
n = 2048
area = 20 + 180 * torch.rand(n)                 # m^2
distance = 30 * torch.rand(n)                   # km
age = 100 * torch.rand(n)                       # years
rooms = torch.randint(1, 7, (n,)).float()
price = area * (20 - 0.6 * distance) * (1 - age / 200) * (1 + 0.05 * torch.randn(n))
price = price.unsqueeze(1)
X = torch.stack([area, distance, age, rooms], dim=1)
X = (X - X.mean(dim=0)) / X.std(dim=0)          # the features are standardised

if args.fixed:
    mean, std = price.mean(), price.std()
    y = (price - mean) / std
else:
    mean, std = 0.0, 1.0
    y = price

model = nn.Sequential(
    nn.Linear(4, 64),
    nn.ReLU(),
    nn.Linear(64, 64),
    nn.ReLU(),
    nn.Linear(64, 1),
)
if not args.fixed:
    model.append(nn.Sigmoid())
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.MSELoss()

batch = 64
for step in range(args.steps):
    idx = torch.randint(0, n, (batch,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    pred = model(X) * std + mean                      # back in thousands
    rmse = (pred - price).pow(2).mean().sqrt().item()
setup = "linear output, standardised prices" if args.fixed else "sigmoid output, raw prices"
print(f"sigmoid_regression: {setup}, {args.steps} steps, final loss {loss.item():.4g}, "
      f"RMSE {rmse:.1f} (price std {price.std().item():.1f}), predictions in "
      f"[{pred.min().item():.4g}, {pred.max().item():.4g}]")

"""A small ReLU regressor for California house prices trained with Adam on raw dollar targets: it crawls.

Source: https://stats.stackexchange.com/questions/409000/should-we-normalize-target-data-as-well-as-input-data
(Cross Validated question)
Bug: the inputs (the housing data set's 8 features) are standardised but the target is the raw median
house value in dollars (mean ~250,000); the network's output starts near 0 and Adam moves each weight by
about lr = 0.001 per step, so the predictions creep up from zero and the error stays near the price scale
("after 2,000 epochs the network was still working the outputs slowly up from zero").
Fix (--fixed): standardise the target for training and map the predictions back to dollars (the target
normalisation the question asks about); model, optimizer and batch size unchanged.
Printed metric (plain python): buggy RMSE $281,797, mean prediction $4;
fixed RMSE $50,207 (price std $93,768).
"""
# expect: cause=input_data
import argparse
import math

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--fixed", action="store_true", help="standardise the target")
args = parser.parse_args()

torch.manual_seed(0)

# California-housing-like districts: 8 features, median house value in dollars (15,000 to 500,001).
n = 4000
income = (torch.randn(n) * 0.5 + 1.3).exp().clamp(0.5, 15)      # median income, tens of k$
age = torch.randint(1, 53, (n,)).float()
rooms = (torch.randn(n) * 0.5 + 7.8).exp()                      # total rooms
bedrooms = rooms * (0.2 + 0.03 * torch.randn(n)).clamp(0.1, 0.4)
population = rooms * (1.1 + 0.3 * torch.rand(n))
households = population / (2.5 + 0.8 * torch.rand(n))
lat = 32.5 + 9.5 * torch.rand(n)
lon = -124.3 + 10 * torch.rand(n)
coast = (-(lon + 122) ** 2 / 4).exp() + (-(lon + 118) ** 2 / 4).exp()
price = (40000 * income + 1000 * age + 120000 * coast - 2000 * (lat - 34).abs()
         + 30000 * torch.randn(n)).clamp(15000, 500001)
X = torch.stack([lon, lat, age, rooms, bedrooms, population, households, income], dim=1)
X = (X - X.mean(0)) / X.std(0)                                   # StandardScaler on the inputs
y = price.unsqueeze(1)

if args.fixed:
    y_mean, y_std = y.mean(), y.std()
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


# "very few non-linear ReLU elements" and a single linear output node
model = nn.Sequential(dense(8, 8), nn.ReLU(), dense(8, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=0.001)

batch = 32
perm = torch.randperm(n)
pos = 0
for _ in range(args.steps):
    if pos + batch > n:
        perm, pos = torch.randperm(n), 0
    idx = perm[pos:pos + batch]
    pos += batch
    loss = ((model(X[idx]) - y_in[idx]) ** 2).mean()          # loss='mse'
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    pred = model(X) * y_std + y_mean                            # back in dollars
    rmse = (pred - y).pow(2).mean().sqrt().item()
setup = "standardised target" if args.fixed else "raw dollar target"
print(f"data_house_price_target: {setup}, {args.steps} steps, RMSE ${rmse:,.0f} "
      f"(price std ${y.std().item():,.0f}), mean prediction ${pred.mean().item():,.0f}")

"""A darts-style RNNModel forecaster fitted on a series with missing values: loss=nan from the start.

Source: https://github.com/unit8co/darts/issues/881
(GitHub issue; maintainer's answer, confirmed by the reporter)
Bug: the target series has a few missing observations (NaN) that go into fit() as they are; every batch
whose window covers one gives a NaN loss, the NaN gradients reach the weights through Adam and training
reports loss=nan however the hyper-parameters are tuned.
Fix (--fixed): fill the missing values before fitting (darts' fill_missing_values: linear
interpolation), as the maintainer suggested; model (RNN, hidden_dim 25, 1 layer, linear head), MSE loss,
Adam lr 1e-3, batch 32 and training_length 24 unchanged.
Printed metric (plain python): buggy final loss nan, validation MSE nan;
fixed final loss 0.0056, validation MSE 0.0027.
"""
# expect: cause=input_data
import argparse
import math

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--fixed", action="store_true", help="fill the missing values before fitting")
args = parser.parse_args()

torch.manual_seed(0)

# A daily sensor-like series: trend, weekly and yearly seasonality and noise, 730 points, with 12
# missing readings (NaN) scattered through the training part.
t = torch.arange(730.0)
series = (50 + 0.02 * t + 8 * torch.sin(2 * math.pi * t / 7) + 15 * torch.sin(2 * math.pi * t / 365)
          + 2 * torch.randn(730))
missing = torch.randperm(600)[:12]
series[missing] = float("nan")

if args.fixed:
    # fill_missing_values: linear interpolation between the nearest observed neighbours
    known = ~series.isnan()
    idx = torch.arange(len(series))
    for i in idx[~known].tolist():
        left = idx[:i][known[:i]][-1]
        right = idx[i + 1:][known[i + 1:]][0]
        w = (i - left) / (right - left)
        series[i] = series[left] * (1 - w) + series[right] * w

# Scaler(): MinMaxScaler fitted on the training part (NaN-aware, as sklearn's is)
train, val = series[:600], series[600:]
lo = train[~train.isnan()].min()
hi = train[~train.isnan()].max()
train, val = (train - lo) / (hi - lo), (val - lo) / (hi - lo)


class RNNModule(nn.Module):
    # darts' _RNNModule: an nn.RNN followed by a linear layer applied at every time step
    def __init__(self, hidden_dim=25, n_rnn_layers=1):
        super().__init__()
        self.rnn = nn.RNN(1, hidden_dim, n_rnn_layers, batch_first=True)
        self.V = nn.Linear(hidden_dim, 1)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.V(out)


model = RNNModule()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
training_length, batch = 24, 32
starts = torch.arange(len(train) - training_length)

for _ in range(args.steps):
    s = starts[torch.randint(0, len(starts), (batch,))]
    win = torch.stack([train[i:i + training_length + 1] for i in s.tolist()]).unsqueeze(2)
    pred = model(win[:, :-1])
    loss = ((pred - win[:, 1:]) ** 2).mean()      # MSELoss on the next value at every step
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    # one-step-ahead forecasts over the validation part, each from the previous 24 values
    full = torch.cat([train[-training_length:], val])
    wins = torch.stack([full[i:i + training_length] for i in range(len(val))]).unsqueeze(2)
    fc = model(wins)[:, -1, 0]
    val_mse = ((fc - val) ** 2).mean().item()
setup = "missing values filled" if args.fixed else "NaN left in the series"
print(f"data_nan_timeseries: {setup}, {args.steps} steps, final loss {loss.item():.4g}, "
      f"validation MSE {val_mse:.4g} (scaled units)")

"""A small Keras MLP fitted to y = x**4 on x in [-100, 100] with raw x and y: it converges to a flat line.

Source: https://stackoverflow.com/questions/52800582/why-do-i-fail-to-predict-y-x4-with-keras-y-x3-works
(Stack Overflow question and accepted answer)
Bug: x (up to 100) and y = x**4 (up to 1e8) go unscaled into Dense(50) -> sigmoid -> Dense(50) -> elu ->
Dense(1) trained with MSE and Adam; the sigmoid layer saturates on the large inputs and the glorot-sized
output layer would need millions of Adam steps to reach outputs of 1e8, so the fit stays a flat line.
Fix (--fixed): the answer's fix: standardise x and y (StandardScaler) for training and map the
predictions back with the inverse transform; model, optimizer and steps unchanged.
Printed metric (plain python): buggy MSE 1.1e+15, RMSE/std(y) 1.25, predictions flat at ~420;
fixed MSE 1.2e+14, RMSE/std(y) 0.41.
"""
# expect: cause=input_data
import argparse
import math

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--fixed", action="store_true", help="standardise x and y (StandardScaler)")
args = parser.parse_args()

torch.manual_seed(0)

x = torch.arange(-100, 100, 0.5).unsqueeze(1)      # np.arange(-100, 100, 0.5): 400 points
y = x ** 4

if args.fixed:
    x_mean, x_std = x.mean(), x.std(unbiased=False)  # StandardScaler
    y_mean, y_std = y.mean(), y.std(unbiased=False)
else:
    x_mean, x_std = torch.tensor(0.0), torch.tensor(1.0)
    y_mean, y_std = torch.tensor(0.0), torch.tensor(1.0)
x_in = (x - x_mean) / x_std
y_in = (y - y_mean) / y_std


def dense(n_in, n_out):
    # Keras Dense default: glorot_uniform kernel, zero bias
    layer = nn.Linear(n_in, n_out)
    limit = math.sqrt(6.0 / (n_in + n_out))
    nn.init.uniform_(layer.weight, -limit, limit)
    nn.init.zeros_(layer.bias)
    return layer


model = nn.Sequential(
    dense(1, 50), nn.Sigmoid(),
    dense(50, 50), nn.ELU(),
    dense(50, 1),
)
optimizer = torch.optim.Adam(model.parameters(), lr=0.001)   # Keras 'adam'

for _ in range(args.steps):                                   # batch_size=len(x): full batch
    loss = ((model(x_in) - y_in) ** 2).mean()                # loss='mse'
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    pred = model(x_in) * y_std + y_mean                       # back to y units
    mse = ((pred - y) ** 2).mean().item()
rel = math.sqrt(mse) / y.std().item()
setup = "standardised x and y" if args.fixed else "raw x and y"
print(f"data_x4_unscaled: {setup}, {args.steps} steps, MSE {mse:.4g} (RMSE / std(y) {rel:.3f}), "
      f"predictions in [{pred.min().item():.4g}, {pred.max().item():.4g}]")

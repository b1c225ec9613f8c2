"""A one-unit Keras linear regression on x=1..20 with the 'sgd' default lr=0.01: the loss explodes.

Source: https://fixeme.com/why-is-my-loss-function-increasing-with-each-epoch/  (mirror of an SO Q&A)
Bug: `Dense(units=1, input_shape=[1])` compiled with `optimizer="sgd"` (lr 0.01) and MSE on
xs = 1..20, ys = xs / 2, full batch (20 < Keras' default batch 32), 500 epochs. With inputs up to 20 the
curvature of the MSE is about 2*mean(x^2) = 287, so lr=0.01 overshoots every step and the loss grows
by ~3.5x per epoch (450, 1603, 5698, ... in the question) until it overflows.
Fix (--fixed): the answer's `keras.optimizers.SGD(learning_rate=0.0001)`.
Printed metric (plain python, 400 of the 500 epochs): buggy final loss nan, predict(25) nan;
fixed final loss 0.0044, predict(25) = 12.38 (true 12.5).
"""
# expect: cause=learning_rate
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--fixed", action="store_true", help="SGD learning rate 0.0001 instead of 0.01")
args = parser.parse_args()

torch.manual_seed(0)

xs = torch.arange(1.0, 21.0).unsqueeze(1)      # 1.0 .. 20.0
ys = xs * 0.5                                  # 0.5 .. 10.0

model = nn.Linear(1, 1)
nn.init.xavier_uniform_(model.weight)          # Keras Dense default: glorot_uniform kernel, zero bias
nn.init.zeros_(model.bias)

lr = 0.0001 if args.fixed else 0.01            # Keras "sgd" string -> SGD(learning_rate=0.01)
optimizer = torch.optim.SGD(model.parameters(), lr=lr)

for _ in range(args.steps):                    # one epoch == one full batch of 20
    loss = ((model(xs) - ys) ** 2).mean()      # loss="mean_squared_error"
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    pred = model(torch.tensor([[25.0]])).item()
print(f"loop_lr_high_keras_linear: lr={lr}, {args.steps} epochs, final loss {loss.item():.4g}, "
      f"predict(25) = {pred:.4g} (true 12.5)")

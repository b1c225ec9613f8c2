"""A single 4->2 linear layer learning to sum inputs, trained without optimizer.zero_grad().

Source: https://github.com/IBM/aihwkit/issues/446  (GitHub issue on examples/01_simple_layer.py)
Bug: the example's loop is `pred = model(x); loss = mse_loss(pred, y); loss.backward(); opt.step()` with
no `opt.zero_grad()`, so every backward adds to the gradients of all earlier steps and SGD steps with the
running sum: the loss falls, then climbs back and oscillates (the issue shows 1.03 -> 0.06 -> 0.87).
Fix (--fixed): `opt.zero_grad()` every iteration, as the issue proposes.
Printed metric (plain python): buggy final loss 0.6077 (min 0.0008 on the way); fixed final loss 0.0099.
"""
# expect: cause=training_loop
import argparse

import torch
from torch import nn
from torch.nn.functional import mse_loss

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--fixed", action="store_true", help="call opt.zero_grad() every iteration")
args = parser.parse_args()

torch.manual_seed(0)

# The example's dataset, verbatim (two samples, four inputs, two outputs).
x = torch.tensor([[0.1, 0.2, 0.4, 0.3], [0.2, 0.1, 0.1, 0.3]])
y = torch.tensor([[1.0, 0.5], [0.7, 0.3]])

# AnalogLinear(4, 2, bias=True) with AnalogSGD(lr=0.1), ported to a digital layer and plain SGD.
model = nn.Linear(4, 2, bias=True)
opt = torch.optim.SGD(model.parameters(), lr=0.1)

losses = []
for _ in range(args.steps):
    if args.fixed:
        opt.zero_grad()
    pred = model(x)
    loss = mse_loss(pred, y)
    loss.backward()
    opt.step()
    losses.append(loss.item())

print(f"loop_zero_grad_aihwkit: {'zero_grad' if args.fixed else 'no zero_grad'}, {args.steps} epochs, "
      f"min loss {min(losses):.4f}, final loss {losses[-1]:.4f}")

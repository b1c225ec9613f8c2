"""A cubic fit to sin(x) trained with a hand-written SGD update on an nn.Module, no torch.optim.

Source: https://pytorch.org/tutorials/beginner/examples_nn/polynomial_nn.html  (official PyTorch
tutorial "Learning PyTorch with Examples", PyTorch: nn)
Bug: none. There is no optimizer object: the loop calls model.zero_grad(), loss.backward() and then
`param -= learning_rate * param.grad` under torch.no_grad(). The loss is a SUM over 2000 points
(MSELoss(reduction='sum')), so it starts in the thousands, and lr is 1e-6 to match.
Fix (--fixed): nothing to fix (accepted and ignored).
Printed metric (plain python): summed loss 7.3e+04 at step 0 -> 184 after 400 steps (the tutorial's
2000 steps reach 9.2, y = -0.015 + 0.844 x + 0.003 x^2 - 0.092 x^3).
"""
# expect: healthy
import argparse
import math

import torch

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--fixed", action="store_true", help="accepted and ignored: the program is correct")
args = parser.parse_args()

torch.manual_seed(0)

# The tutorial's data: 2000 points of sin on [-pi, pi], features (x, x^2, x^3).
x = torch.linspace(-math.pi, math.pi, 2000)
y = torch.sin(x)
p = torch.tensor([1, 2, 3])
xx = x.unsqueeze(-1).pow(p)

model = torch.nn.Sequential(
    torch.nn.Linear(3, 1),
    torch.nn.Flatten(0, 1),
)
loss_fn = torch.nn.MSELoss(reduction="sum")

learning_rate = 1e-6
first = None
for _ in range(args.steps):
    y_pred = model(xx)
    loss = loss_fn(y_pred, y)
    if first is None:
        first = loss.item()
    # Zero the gradients before running the backward pass.
    model.zero_grad()
    loss.backward()
    # Plain gradient descent by hand: each parameter is a tensor with its own .grad.
    with torch.no_grad():
        for param in model.parameters():
            param -= learning_rate * param.grad

a = model[0].bias.item()
b, c, d = model[0].weight.detach().reshape(-1).tolist()
print(f"manual_sgd_polynomial: {args.steps} steps, summed loss {first:.4g} -> {loss.item():.4g}, "
      f"y = {a:.4f} + {b:.4f} x + {c:.4f} x^2 + {d:.4f} x^3")

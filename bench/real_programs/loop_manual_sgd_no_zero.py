"""Hand-written linear regression on bare tensors whose gradients are never zeroed.

Source: https://github.com/greebear/pytorch-learning/issues/1  (GitHub issue, fixed by the author)
Bug: the notebook fits y = 2x + 5 + noise (x in [0, 10), 20 points) with `w = torch.randn(1,
requires_grad=True)`, `b = torch.zeros(1, requires_grad=True)`, loss `(0.5 * (y - y_pred) ** 2).mean()`,
`loss.backward()` and `w.data.sub_(lr * w.grad)`, but without `w.grad.zero_()` / `b.grad.zero_()`: the
gradients of every past iteration keep adding up, so each update uses their running sum and "the loss is
not always decreasing, even [with] lr very small".
Fix (--fixed): zero `w.grad` and `b.grad` after each update, as the issue says (and the course's
reference code does).
Printed metric (plain python): buggy final loss 10.19 (w=3.19, b=2.54); fixed final loss 0.978
(w=2.56, b=1.82, stopping at iteration 80).
"""
# expect: cause=training_loop
import argparse

import torch

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--fixed", action="store_true", help="zero w.grad and b.grad after each update")
args = parser.parse_args()

torch.manual_seed(10)

lr = 0.05  # the course's learning rate

x = torch.rand(20, 1) * 10                 # x data, shape (20, 1)
y = 2 * x + (5 + torch.randn(20, 1))       # y data with noise

w = torch.randn((1), requires_grad=True)
b = torch.zeros((1), requires_grad=True)

for iteration in range(args.steps):
    wx = torch.mul(w, x)
    y_pred = torch.add(wx, b)
    loss = (0.5 * (y - y_pred) ** 2).mean()
    loss.backward()
    b.data.sub_(lr * b.grad)
    w.data.sub_(lr * w.grad)
    if args.fixed:
        w.grad.zero_()
        b.grad.zero_()
    # the notebook plots every 20 iterations and stops there once the MSE is below 1
    if iteration % 20 == 0 and loss.item() < 1:
        break

with torch.no_grad():
    final = (0.5 * (y - (w * x + b)) ** 2).mean().item()   # loss of the parameters it ends with
print(f"loop_manual_sgd_no_zero: {'grads zeroed' if args.fixed else 'grads accumulate'}, "
      f"stopped at iteration {iteration}, final loss {final:.4g}, w={w.item():.4g} (true 2), "
      f"b={b.item():.4g} (true 5)")

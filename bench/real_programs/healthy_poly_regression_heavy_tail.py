"""A linear fit of a degree-4 polynomial on features x..x^4 of Gaussian x: heavy-tailed inputs, loss spikes.

Source: https://github.com/pytorch/examples/blob/main/regression/main.py  (official pytorch/examples,
"Linear regression" example)
Bug: none. The features are [x, x^2, x^3, x^4] of x ~ N(0, 1), a fresh batch of 32 every step, so
x^4 is heavy-tailed (mostly below 10, occasionally above 100): a batch holding one large x gives a
one-step jump in the smooth-L1 loss and a large gradient, after which the loss drops back. There is
no optimizer object: fc.zero_grad() and `param.data.add_(-0.1 * param.grad)`, and training stops
as soon as a batch's loss is below 1e-3, all as in the source (capped at --steps here).
Fix (--fixed): nothing to fix (accepted and ignored).
Printed metric (plain python): smooth-L1 loss 11.65 -> 0.18 in 400 batches with 6 one-step spikes (x5);
learned y = +7.53x -1.51x^2 -10.83x^3 +2.71x^4 -5.41 vs actual +7.70x -1.47x^2 -10.89x^3 +2.84x^4
-5.42 (with --steps 5000 the source's stop rule, loss < 1e-3, fires at batch 758).
"""
# expect: healthy
import argparse

import torch
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=400, help="cap on batches (source: until converged)")
parser.add_argument("--fixed", action="store_true", help="accepted and ignored: the program is correct")
args = parser.parse_args()

torch.manual_seed(0)

POLY_DEGREE = 4
W_target = torch.randn(POLY_DEGREE, 1) * 5
b_target = torch.randn(1) * 5


def make_features(x):
    """Builds features i.e. a matrix with columns [x, x^2, x^3, x^4]."""
    x = x.unsqueeze(1)
    return torch.cat([x ** i for i in range(1, POLY_DEGREE + 1)], 1)


def f(x):
    """Approximated function."""
    return x.mm(W_target) + b_target.item()


def poly_desc(W, b):
    """Creates a string description of a polynomial."""
    result = "y = "
    for i, w in enumerate(W):
        result += f"{w:+.2f} x^{i + 1} "
    result += f"{b[0]:+.2f}"
    return result


def get_batch(batch_size=32):
    """Builds a batch i.e. (x, f(x)) pair."""
    random = torch.randn(batch_size)
    x = make_features(random)
    y = f(x)
    return x, y


# Define model
fc = torch.nn.Linear(W_target.size(0), 1)

losses = []
for batch_idx in range(1, args.steps + 1):  # noqa: B007 (used after the loop)
    batch_x, batch_y = get_batch()
    # Reset gradients
    fc.zero_grad()
    # Forward pass
    output = F.smooth_l1_loss(fc(batch_x), batch_y)
    loss = output.item()
    losses.append(loss)
    # Backward pass
    output.backward()
    # Apply gradients
    for param in fc.parameters():
        param.data.add_(-0.1 * param.grad)
    # Stop criterion
    if loss < 1e-3:
        break

spikes = sum(1 for a, b in zip(losses, losses[1:], strict=False) if b > 5 * a and b > 1.0)
print(f"poly_regression_heavy_tail: loss {losses[0]:.4g} -> {loss:.6f} after {batch_idx} batches, "
      f"{spikes} one-step spikes (x5); learned {poly_desc(fc.weight.view(-1), fc.bias)}; "
      f"actual {poly_desc(W_target.view(-1), b_target)}")

"""A hand-written binary cross-entropy in bfloat16: the sigmoid rounds to exactly 1.0 and
log(1 - p) is -inf.

Fault shown: a classifier is trained under `torch.autocast(dtype=torch.bfloat16)` with the
loss written by hand, `-(y * log(p) + (1 - y) * log(1 - p))` on `p = sigmoid(logits)`.
bfloat16 keeps 8 bits of mantissa: the largest value below 1.0 is 1 - 2^-9, so a sigmoid of
any input above 6.2 is exactly 1.0. As the model grows confident (within 20 steps), some
row's probability rounds to 1.0, log(1 - p) = -inf, the loss turns NaN, and the update
writes NaN into every weight. In float32 the same loss is finite up to logits of 16.6. The
one-line fix is to compute the loss from the logits.

Expected detection under `neuraldbg run`: the loss `nonfinite` within 30 steps, cause
`precision`, the evidence naming the bfloat16 sigmoid and the hand-written log. With
`--fixed` (`F.binary_cross_entropy_with_logits` on the logits, nothing else changed) the
run stays healthy.

    python sample_scripts/bf16_log.py [--fixed] [--steps 150] [--device cpu]
    neuraldbg run --fail-on nonfinite sample_scripts/bf16_log.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=150)
parser.add_argument("--device", default="cpu")
parser.add_argument("--fixed", action="store_true", help="binary_cross_entropy_with_logits")
args = parser.parse_args()

torch.manual_seed(0)
device = torch.device(args.device)
X = torch.randn(4096, 32, device=device)
y = (X @ torch.randn(32, device=device) > 0).float()
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

for step in range(args.steps):
    i = torch.randint(0, len(X), (128,), device=device)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        logits = model(X[i]).squeeze(1)
        if args.fixed:
            loss = nn.functional.binary_cross_entropy_with_logits(logits.float(), y[i])
        else:
            p = torch.sigmoid(logits)
            loss = -(y[i] * torch.log(p) + (1 - y[i]) * torch.log(1 - p)).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 25 == 0 or step == args.steps - 1:
        print(f"step {step:4d}  loss {loss.item():.4f}")

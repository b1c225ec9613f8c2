"""A float16 activation climbs past 65504 and overflows: a pre-norm residual MLP under
`torch.autocast(dtype=torch.float16)`.

Fault shown: each block computes `x + down(gelu(up(norm(x))))`, the residual stream is not
normalised until the head (pre-norm, as in T5 and GPT-2), and the final LayerNorm makes the
loss blind to the stream's scale: nothing holds the down-projections' outputs back, and with
Adam they grow step after step (to the tens of thousands within 20 steps). float32 holds
them; float16 tops out at 65504, so the stream turns inf, the LayerNorm after it NaN, and
the GradScaler skips every step from there on until its scale collapses. This is how T5
and other large models fail in float16 and train in bfloat16.

Expected detection under `neuraldbg run`: activation `nonfinite` at `norm` (the first layer
that reads the overflowed stream) within 30 steps, cause `precision`, the evidence naming a
down-projection's float16 output climbing toward 65504; then `(scaler)` `collapsed`. With
`--fixed` (bfloat16, float32's range, and no GradScaler, nothing else changed) the run
stays healthy.

    python sample_scripts/fp16_overflow.py [--fixed] [--steps 150] [--device cpu]
    neuraldbg run --fail-on nonfinite sample_scripts/fp16_overflow.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=150)
parser.add_argument("--lr", type=float, default=0.25)
parser.add_argument("--device", default="cpu")
parser.add_argument("--fixed", action="store_true", help="bfloat16 autocast, no GradScaler")
args = parser.parse_args()

torch.manual_seed(0)
width = 64


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.act = nn.GELU()
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(self.act(self.up(self.norm(x))))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, width)
        self.blocks = nn.Sequential(Block(), Block())
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        return self.head(self.norm(self.blocks(self.embed(x))))


device = torch.device(args.device)
model = Model().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
dtype = torch.bfloat16 if args.fixed else torch.float16
scaler = torch.amp.GradScaler(device.type, enabled=not args.fixed)

X = torch.randn(2048, 16, device=device)
y = torch.sin(X[:, :4].sum(dim=1, keepdim=True))

for step in range(args.steps):
    i = torch.randint(0, len(X), (128,), device=device)
    with torch.autocast(device.type, dtype=dtype):
        loss = nn.functional.mse_loss(model(X[i]).float(), y[i])
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    if step % 25 == 0 or step == args.steps - 1:
        print(f"step {step:4d}  loss {loss.item():.4f}")

"""Prints 'ready' after a first training step, then trains until a signal arrives."""
import sys

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 8), torch.randn(32, 1)
step = 0
while True:
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    if step == 3:
        print("ready", flush=True)
    if step > 2_000_000:
        sys.exit(5)

"""Trains 10 steps; unless given --no-crash, crashes at step 5 with a TypeError."""
import sys

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 8), torch.randn(32, 1)
for step in range(10):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 4 and "--no-crash" not in sys.argv:
        model(x, "unexpected")  # forward() takes 2 positional arguments but 3 were given
print("trained 10 steps")

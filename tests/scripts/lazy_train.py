"""A model with a lazy layer, materialised by a dry-run forward before the optimizer exists."""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.LazyLinear(16), nn.ReLU(), nn.Linear(16, 1))
x, y = torch.randn(32, 8), torch.randn(32, 1)
model(x)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(4):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("lazy ok")

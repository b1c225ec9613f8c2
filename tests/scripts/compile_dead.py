"""A torch.compile'd model whose ReLU is dead from the start (bias -50)."""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.act = nn.ReLU()
        self.out = nn.Linear(16, 1)

    def forward(self, x):
        return self.out(self.act(self.fc(x)))


torch.manual_seed(0)
net = Net()
with torch.no_grad():
    net.fc.bias.fill_(-50.0)
model = torch.compile(net)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 8), torch.randn(32, 1)
for _ in range(4):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("compiled ok")

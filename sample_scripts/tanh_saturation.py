"""Saturated tanh layers: features fed in raw units, without standardisation.

Fault shown: a tanh MLP regresses a price from tabular features that were never
standardised (areas in m^2, years, distances in metres: values in the tens to thousands).
The first Linear layer's outputs are in the hundreds, so its tanh (`act1`) sits at -1 or +1
for nearly every unit and input: its local derivative is ~0, the layers below learn nothing,
and the loss barely moves.

Expected detection under `neuraldbg run`: layer `act1` (Tanh), signal `activation`,
`null -> saturated` at step 0, staying saturated.

    python sample_scripts/tanh_saturation.py [--steps N]
    neuraldbg run sample_scripts/tanh_saturation.py
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=60)
args = parser.parse_args()

torch.manual_seed(0)

# Raw tabular features: area (m^2), year built, distance to centre (m), rooms, floor.
n = 1024
area = 40 + 160 * torch.rand(n)
year = 1900 + 120 * torch.rand(n)
distance = 20000 * torch.rand(n)
rooms = torch.randint(1, 7, (n,)).float()
floor = torch.randint(0, 20, (n,)).float()
X = torch.stack([area, year, distance, rooms, floor], dim=1)
price = 3.0 * area + 0.5 * (year - 1900) - 0.01 * distance + 10 * rooms
y = ((price - price.mean()) / price.std()).unsqueeze(1)      # the target *is* standardised


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(5, 64)
        self.act1 = nn.Tanh()
        self.fc2 = nn.Linear(64, 64)
        self.act2 = nn.Tanh()
        self.out = nn.Linear(64, 1)

    def forward(self, x):
        return self.out(self.act2(self.fc2(self.act1(self.fc1(x)))))


model = Regressor()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.MSELoss()

for step in range(args.steps):
    idx = torch.randint(0, n, (64,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

print(f"tanh_saturation: {args.steps} steps, final loss {loss.item():.4f}")

"""A loop that catches every exception of a step and goes on (a common 'robust' loop): a
NaN batch at step 5; the script counts the steps that raised and checks its weights."""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
raised = 0
for step in range(12):
    x, y = torch.randn(32, 8), torch.randint(0, 2, (32,))
    if step == 5:
        x[3, 1] = float("nan")
    try:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    except Exception as e:  # noqa: BLE001
        raised += 1
        last = type(e).__name__
finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
print(f"swallow_stop: raised {raised} times ({last}), weights finite: {finite}")

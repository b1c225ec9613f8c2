"""A batch holding an inf under float16 autocast and a GradScaler: every step's gradients
overflow, so the scaler skips every optimizer step (its pre-step never runs). Prints the
steps taken and whether the weights stayed finite, from a finally block."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu")
x, y = torch.randn(64, 8), torch.randn(64, 1)
x[3] = float("inf")       # a batch with an inf: every step's gradients overflow
steps = 0
try:
    for step in range(60):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.functional.mse_loss(model(x).float(), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        steps += 1
finally:
    print("steps", steps, "finite", all(torch.isfinite(p).all() for p in model.parameters()))

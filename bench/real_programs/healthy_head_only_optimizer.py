"""Fine-tuning only the last layer via optimizer(model[-1].parameters()); the backbone still requires grad.

Source: https://discuss.pytorch.org/t/best-practice-for-freezing-layers/58156  (PyTorch forum thread
"Best practice for freezing layers?": the question's `optimizer = optim.SGD(model[-1].parameters(),
lr=1e0)` and the answers)
Bug: none. The backbone's parameters keep requires_grad=True, so backward() still computes and,
since optimizer.zero_grad() only zeroes the head's grads, ACCUMULATES their .grad step after step;
but they are not in the optimizer, so they never change. The answers in the thread confirm that this
is functionally equivalent to setting requires_grad=False (only wasted compute).
The thread gives no model or data: the "pretrained" backbone is trained here on a 5-class source
task first (Adam, all parameters), then a fresh 3-class head is fine-tuned on a related target task
with SGD lr 1 over model[-1] only.
Fix (--fixed): nothing to fix (accepted and ignored).
Printed metric (plain python): target-task loss 1.160 (first batch) -> 0.491 (all data), accuracy
0.787 after 200 head-only steps (chance 0.33); the backbone's weights are bit-identical before and
after fine-tuning.
"""
# expect: healthy
import argparse

import torch
from torch import nn, optim

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=200, help="fine-tuning steps (after 200 pretraining)")
parser.add_argument("--fixed", action="store_true", help="accepted and ignored: the program is correct")
args = parser.parse_args()

torch.manual_seed(0)

# Source and target tasks share hidden features of the same 16 standardised inputs.
n, d = 4096, 16
X = torch.randn(n, d)
shared = torch.relu(X @ torch.randn(d, 24))
y_source = (shared @ torch.randn(24, 5)).argmax(1)
y_target = (shared @ torch.randn(24, 3)).argmax(1)

# A tanh backbone: its features are bounded, which keeps the thread's lr of 1 stable for the head.
model = nn.Sequential(
    nn.Linear(d, 32), nn.Tanh(),
    nn.Linear(32, 32), nn.Tanh(),
    nn.Linear(32, 5),
)
criterion = nn.CrossEntropyLoss()

# "Pretraining" on the source task, all parameters.
pre_opt = optim.Adam(model.parameters(), lr=1e-3)
for _ in range(200):
    idx = torch.randint(0, n, (64,))
    loss = criterion(model(X[idx]), y_source[idx])
    pre_opt.zero_grad()
    loss.backward()
    pre_opt.step()

# New head for the target task; only it goes to the optimizer (the thread's approach).
model[-1] = nn.Linear(32, 3)
optimizer = optim.SGD(model[-1].parameters(), lr=1e0)
backbone_before = [p.detach().clone() for p in model[:-1].parameters()]

first = None
for _ in range(args.steps):
    idx = torch.randint(0, n, (64,))
    loss = criterion(model(X[idx]), y_target[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if first is None:
        first = loss.item()

with torch.no_grad():
    logits = model(X)
    full_loss = criterion(logits, y_target).item()
    acc = (logits.argmax(1) == y_target).float().mean().item()
unchanged = all(torch.equal(a, b) for a, b in zip(backbone_before, model[:-1].parameters(), strict=True))
print(f"head_only_optimizer: {args.steps} head steps, target loss {first:.3f} -> {full_loss:.3f}, "
      f"accuracy {acc:.3f}, backbone unchanged {unchanged}")

"""A Conv1D binary classifier ends in Dense(1) + softmax under binary crossentropy: it always predicts 1.

Source: https://geek-questions.imtqy.com/articles/1270335/index.html  (mirror of the Stack Overflow question
"Why does CNN binary Keras always predict 1?" with its answer)
Bug: `Dense(1)` followed by `Activation('softmax')`: a softmax over one unit is identically 1.0, so every
prediction is class 1 (the confusion matrix [[0 362] [0 608]]) and the gradient through it is zero.
Fix (--fixed): the answer's fix, a sigmoid activation on the single output unit.
Printed metric (plain python): buggy test accuracy 0.625 (predicts 1 for all); fixed test accuracy 0.866
with 2 threads, 0.833 with OMP_NUM_THREADS=1 (the fixed model's values vary with the thread count).
"""
# expect: cause=architecture

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--fixed", action="store_true", help="sigmoid output")
args = parser.parse_args()

torch.manual_seed(0)


def make(n):
    # Windows of 10 time steps x 4 standardised price columns (about -1.06 as in the question); the
    # label says whether the series rises over the window (62.7% of the test rows are 1).
    trend = torch.randn(n, 1, 1) * 0.004 + 0.0012
    steps = torch.arange(10).float().view(1, 10, 1)
    x = -1.064 + trend * steps + 0.0008 * torch.randn(n, 10, 4)
    y = (trend.view(n, 1) > 0).float()
    return x.transpose(1, 2), y                   # (N, 4 channels, 10 steps)


X, y = make(6000)
Xt, yt = make(970)

model = nn.Sequential(
    nn.Conv1d(4, 16, 4, padding="same"), nn.BatchNorm1d(16), nn.LeakyReLU(0.3), nn.Dropout(0.2),
    nn.Conv1d(16, 8, 4, padding="same"), nn.BatchNorm1d(8), nn.LeakyReLU(0.3), nn.Dropout(0.2),
    nn.Flatten(),
    nn.Linear(80, 64), nn.BatchNorm1d(64), nn.LeakyReLU(0.3),
    nn.Linear(64, 1),
    nn.Sigmoid() if args.fixed else nn.Softmax(dim=1),
)
for m in model:                                   # Keras defaults: glorot_uniform, zero bias
    if isinstance(m, nn.Conv1d | nn.Linear):
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)
optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
eps = 1e-7

for _ in range(args.steps):
    idx = torch.randint(0, len(X), (128,))
    p = model(X[idx]).clamp(eps, 1 - eps)
    t = y[idx]
    loss = -(t * p.log() + (1 - t) * (1 - p).log()).mean()              # Keras binary_crossentropy
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

model.eval()
with torch.no_grad():
    pred = model(Xt).round()
acc = (pred == yt).float().mean().item()
print(f"softmax1_bce_conv1d: final loss {loss.item():.4g}, test accuracy {acc:.3f}, "
      f"predicted 1 for {pred.mean().item():.1%} of the test rows")

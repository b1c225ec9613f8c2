"""A CNN ends in Dense(1, softmax) under categorical crossentropy: the output is always 1, nothing learns.

Source: https://stats.stackexchange.com/questions/481881/convolutional-neural-network-fails-even-when-given-answer
(Cross Validated question and its answer)
Bug: `Dense(1, activation='softmax')` normalises a single unit, so every prediction is exactly 1.0 ("true for
everything"); Keras' categorical_crossentropy on it is -y*log(clip(1)) ~ 0 with a zero gradient, so the
network cannot learn even though the label is written into the input.
Fix (--fixed): the answer's fix for one output unit: a sigmoid activation with binary_crossentropy.
Printed metric (plain python): buggy test accuracy 0.531 (predicts 1 for all); fixed test accuracy 1.000.
"""
# expect: cause=architecture

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=6, help="batches of 32 (one epoch of 192 samples)")
parser.add_argument("--fixed", action="store_true", help="sigmoid output with binary crossentropy")
args = parser.parse_args()

torch.manual_seed(0)

# Inputs of shape (99, 25, 2) (channels first here); the boolean target is written into the
# second channel, as the asker did ("I simplified the input to give it the output as the input").
n = 32 * args.steps
y = torch.randint(0, 2, (n, 1)).float()
X = torch.randn(n, 2, 99, 25)
X[:, 1] = y.view(n, 1, 1)

model = nn.Sequential(
    nn.Conv2d(2, 30, kernel_size=3),
    nn.ReLU(),
    nn.Conv2d(30, 64, kernel_size=3),
    nn.ReLU(),
    nn.Flatten(),
    nn.Linear(64 * 95 * 21, 1),
)
for m in model:                                   # Keras defaults: glorot_uniform, zero bias
    if isinstance(m, nn.Conv2d | nn.Linear):
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)
optimizer = torch.optim.Adam(model.parameters(), lr=0.001)   # Keras 'adam'
eps = 1e-7

for step in range(args.steps):
    xb, yb = X[32 * step:32 * (step + 1)], y[32 * step:32 * (step + 1)]
    out = model(xb)
    if args.fixed:
        p = torch.sigmoid(out).clamp(eps, 1 - eps)
        loss = -(yb * p.log() + (1 - yb) * (1 - p).log()).mean()        # binary_crossentropy
    else:
        p = torch.softmax(out, dim=1)                                     # one unit: always 1.0
        p = p / p.sum(dim=1, keepdim=True)
        loss = -(yb * p.clamp(eps, 1 - eps).log()).sum(1).mean()         # categorical_crossentropy
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

torch.manual_seed(1)
yt = torch.randint(0, 2, (64, 1)).float()
Xt = torch.randn(64, 2, 99, 25)
Xt[:, 1] = yt.view(64, 1, 1)
with torch.no_grad():
    out = model(Xt)
    p = torch.sigmoid(out) if args.fixed else torch.softmax(out, dim=1)
    acc = (p.round() == yt).float().mean().item()
setup = "sigmoid + binary_crossentropy" if args.fixed else "softmax(1 unit) + categorical_crossentropy"
print(f"softmax1_cce_cnn: {setup}, final loss {loss.item():.4g}, test accuracy {acc:.3f}")

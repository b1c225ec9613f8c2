"""A 106-feature binary classifier ends in Dense(1, relu) under binary crossentropy: loss frozen at 4.4380.

Source: https://github.com/keras-team/keras/issues/4784  (GitHub issue "Accuracy not changing across the
epochs", with the answer by bstriner and the reporter's confirmation)
Bug: the last layer is `Dense(1, init='uniform', activation='relu')` under `binary_crossentropy`. Its
pre-activation is negative for every row, so the relu outputs 0, Keras clips it to eps = 1e-7 and the loss
is the positive rate times -log(eps): 0.2753 x 16.118 = 4.4380, with accuracy 0.7247 (all rows predicted 0),
identical every epoch: the relu passes no gradient back, nothing moves.
Fix (--fixed): the answer's fix, "if your targets are [0,1], use a sigmoid output layer and
binary_crossentropy loss"; the reporter: "Once I set the output layer to sigmoid, I see accuracy improving".
Printed metric (plain python): buggy loss 4.5265 (= 0.2808 positive rate x 16.118), accuracy 0.7192,
frozen from step 0; fixed loss 0.6752 (falling; at lr 1e-4 accuracy is still the base rate 0.7192).
"""
# expect: cause=architecture layer=(output)

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--fixed", action="store_true", help="sigmoid output layer")
args = parser.parse_args()

torch.manual_seed(2)   # a seed where the relu starts dead on every row, as in the report

# Train.txt is not shown in the issue: 106 numeric columns and a 0/1 label, about 27.5% ones (the frozen
# accuracy 0.7247 is the share of zeros). Features here are counts/ratios in 0..1 with a linear signal.
n = 1200
X = torch.rand(n, 106)
w_true = torch.randn(106) * 0.6
logit = (X - 0.5) @ w_true - 1.35
Y = (torch.rand(n) < torch.sigmoid(logit)).float().unsqueeze(1)


def dense(i, o):
    layer = nn.Linear(i, o)
    nn.init.uniform_(layer.weight, -0.05, 0.05)    # Keras 1 init='uniform': U(-0.05, 0.05), zero bias
    nn.init.zeros_(layer.bias)
    return layer


model = nn.Sequential(
    dense(106, 64), nn.ReLU(),
    dense(64, 32), nn.Tanh(),
    dense(32, 12), nn.ReLU(),
    dense(12, 8), nn.Sigmoid(),
    dense(8, 1), nn.Sigmoid() if args.fixed else nn.ReLU(),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.0001, momentum=0.4)
eps = 1e-7
batch = 300                                        # model.fit(X, Y, nb_epoch=100, batch_size=300)

step = 0
while step < args.steps:
    perm = torch.randperm(n)
    for i in range(0, n, batch):
        if step >= args.steps:
            break
        idx = perm[i:i + batch]
        p = model(X[idx]).clamp(eps, 1 - eps)
        t = Y[idx]
        loss = -(t * p.log() + (1 - t) * (1 - p).log()).mean()          # Keras binary_crossentropy
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1

with torch.no_grad():
    p = model(X).clamp(eps, 1 - eps)
    full = -(Y * p.log() + (1 - Y) * (1 - p).log()).mean().item()
    acc = ((p > 0.5).float() == Y).float().mean().item()
print(f"relu_output_bce_keras: {args.steps} steps, loss {full:.4f}, acc {acc:.4f} "
      f"(positive rate {Y.mean().item():.4f})")

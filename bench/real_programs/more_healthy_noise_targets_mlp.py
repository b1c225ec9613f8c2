"""A deep ReLU MLP regressed on targets that are pure noise: the loss sits at the targets' variance.

Source: https://example-a.com/answer/73134101  (mirror of the Stack Overflow question "Can neural network
converge to completely random function", with its answer)
Bug: none in the training code. The asker draws 2 inputs and 1 target independently from N(0, 1)
(the target min-max scaled to 0..1) and fits 11 Dense(25, relu) layers plus a linear output with MSE,
Adam lr 0.01 (amsgrad), batch 1000, unshuffled. There is no relation between inputs and targets, so the
best a model can do is predict the mean: the loss drops to the targets' variance within the first epoch
and stays there:
"the network doesn't learn anything and the loss is stuck", which is the right outcome; the answer: with a
validation split it cannot learn, and fitting noise only memorises.
Fix (--fixed): nothing to fix (accepted and ignored).
Printed metric (plain python): MSE 0.27212 at step 0 (init output), 0.01727 after 400 steps; target
variance 0.01726.
"""
# expect: healthy

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--fixed", action="store_true", help="accepted and ignored: the program is correct")
args = parser.parse_args()

torch.manual_seed(0)

n_hidden_units, num_lay, num_of_xs = 25, 10, 2
learning_rate, batch_size = 0.01, 1000
inputs_train = torch.randn(batch_size * 10, num_of_xs)
outputs_train = torch.randn(batch_size * 10, 1)
outputs_train = (outputs_train - outputs_train.min()) / (outputs_train.max() - outputs_train.min())


def dense(i, o):
    layer = nn.Linear(i, o)
    nn.init.uniform_(layer.weight, -0.25, 0.25)     # RandomUniform(-0.25, 0.25); Keras bias zeros
    nn.init.zeros_(layer.bias)
    return layer


layers = [dense(num_of_xs, n_hidden_units), nn.ReLU()]
for _ in range(num_lay):
    layers += [dense(n_hidden_units, n_hidden_units), nn.ReLU()]
model = nn.Sequential(*layers, dense(n_hidden_units, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate, betas=(0.9, 0.999), eps=1e-7, amsgrad=True)

first = None
step = 0
while step < args.steps:
    for i in range(0, len(inputs_train), batch_size):          # shuffle=False
        if step >= args.steps:
            break
        x, y = inputs_train[i:i + batch_size], outputs_train[i:i + batch_size]
        loss = ((model(x) - y) ** 2).mean()                     # loss='mse'
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        first = loss.item() if first is None else first
        step += 1

with torch.no_grad():
    mse = ((model(inputs_train) - outputs_train) ** 2).mean().item()
print(f"noise_targets_mlp: MSE {first:.5f} at step 0, {mse:.5f} after {args.steps} steps; "
      f"target variance {outputs_train.var(unbiased=False).item():.5f}")

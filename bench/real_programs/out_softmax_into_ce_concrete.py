"""An MNIST MLP with Concrete Dropout applies softmax before F.cross_entropy: a double softmax.

Source: https://github.com/danielkelshaw/ConcreteDropout/issues/11  (GitHub issue; fixed in PR #12,
mnist_example.py at commit 7c0fdd7 before the fix)
Bug: the last layer is `nn.Sequential(self.fc4, self.softmax)` and the training loss is
`F.cross_entropy(outputs, labels)`, which applies log-softmax again to those probabilities: the loss is
bounded below by ~1.46 and its gradient is squashed.
Fix (--fixed): PR #12 removes the softmax from the output layer (logits go to F.cross_entropy).
Printed metric (plain python): buggy accuracy 0.112 (test loss 2.35);
fixed accuracy 0.999 (test loss 0.15; lr 0.1 can make the fixed logits over-confident).
Shrunk for the benchmark: hidden width 128 (the example: 512) and 150 steps (about 1.5 epochs of the
6400 synthetic digits); init, optimizer, lr, loss and batch size as the example.
"""
# expect: cause=architecture

import argparse

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=150)
parser.add_argument("--fixed", action="store_true", help="no softmax before F.cross_entropy")
args = parser.parse_args()

torch.manual_seed(0)


class ConcreteDropout(nn.Module):
    """condrop.ConcreteDropout from the repository (Gal et al., 'Concrete Dropout')."""

    def __init__(self, weight_regulariser, dropout_regulariser, init=0.1):
        super().__init__()
        self.weight_regulariser = weight_regulariser
        self.dropout_regulariser = dropout_regulariser
        logit = torch.log(torch.tensor(init)) - torch.log(torch.tensor(1 - init))
        self.p_logit = nn.Parameter(logit.view(1))
        self.regularisation = 0.0

    def forward(self, x, layer):
        p = torch.sigmoid(self.p_logit)
        eps, tmp = 1e-7, 0.1
        u = torch.rand_like(x)
        drop = torch.sigmoid((torch.log(p + eps) - torch.log(1 - p + eps) + torch.log(u + eps)
                              - torch.log(1 - u + eps)) / tmp)
        output = layer(x * (1 - drop) / (1 - p))
        sum_of_squares = sum(torch.sum(param ** 2) for param in layer.parameters())
        weights_reg = self.weight_regulariser * sum_of_squares / (1.0 - p)
        dropout_reg = p * torch.log(p) + (1.0 - p) * torch.log(1.0 - p)
        dropout_reg = dropout_reg * self.dropout_regulariser * x[0].numel()
        self.regularisation = weights_reg + dropout_reg
        return output


class MLPConcreteDropout(nn.Module):
    def __init__(self, n_hidden=128):
        super().__init__()
        self.fc1 = nn.Linear(784, n_hidden)
        self.fc2 = nn.Linear(n_hidden, n_hidden)
        self.fc3 = nn.Linear(n_hidden, n_hidden)
        self.fc4 = nn.Linear(n_hidden, 10)
        w, d = 1e-6, 1e-3
        self.cds = nn.ModuleList([ConcreteDropout(w, d) for _ in range(4)])
        self.relu = nn.ReLU()
        self.softmax = nn.Softmax(dim=1)

    def forward(self, x):
        x = x.view(-1, 784)
        x = self.cds[0](x, nn.Sequential(self.fc1, self.relu))
        x = self.cds[1](x, nn.Sequential(self.fc2, self.relu))
        x = self.cds[2](x, nn.Sequential(self.fc3, self.relu))
        last = self.fc4 if args.fixed else nn.Sequential(self.fc4, self.softmax)
        return self.cds[3](x, last)

    def regularisation(self):                        # @condrop.concrete_regulariser
        return sum(cd.regularisation for cd in self.cds)


def make(n):
    # MNIST-shaped digits: each class is a fixed random 28x28 stroke template plus noise, pixels in
    # [0, 1] then normalised with MNIST's (0.1307, 0.3081) as the example's transform does.
    g = torch.Generator().manual_seed(1)
    templates = (torch.rand(10, 784, generator=g) < 0.15).float()
    labels = torch.randint(0, 10, (n,))
    img = (templates[labels] * (0.6 + 0.4 * torch.rand(n, 784)) + 0.3 * torch.rand(n, 784)).clamp(0, 1)
    img *= torch.rand(n, 784) > 0.3                  # strokes broken at random
    return (img - 0.1307) / 0.3081, labels


X, y = make(6400)
Xt, yt = make(1000)
model = MLPConcreteDropout()
optimiser = torch.optim.Adam(model.parameters(), lr=0.1)        # the example's default --lr 0.1

model.train()
for step in range(args.steps):
    i = (step * 64) % len(X)
    data, labels = X[i:i + 64], y[i:i + 64]                      # batch_size 64, no shuffle
    optimiser.zero_grad()
    outputs = model(data)
    loss = F.cross_entropy(outputs, labels) + model.regularisation()
    loss.backward()
    optimiser.step()

model.eval()
with torch.no_grad():
    outputs = model(Xt)
    test_loss = F.cross_entropy(outputs, yt).item()
    accuracy = (outputs.argmax(1) == yt).float().mean().item()
print(f"softmax_into_ce_concrete: train loss {loss.item():.4g}, test loss {test_loss:.4g}, "
      f"accuracy {accuracy:.3f}")

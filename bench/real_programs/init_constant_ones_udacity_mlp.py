"""Udacity's weight-init MLP (784-256-128-10, dropout 0.2) with every Linear weight set to the constant 1.

Source: https://github.com/udacity/deep-learning-v2-pytorch/blob/master/weight-initialization/weight_initialization_exercise.ipynb
(course notebook, with helpers.py: "Constant Weight ... all ones": the notebook trains the model with
`nn.init.constant_(m.weight, constant_weight)` and bias 0 and shows the loss staying high and validation
accuracy near chance, because every unit of a layer computes the same thing; the solution notebook's fix is
weights drawn from a normal distribution of std 1/sqrt(n))
Program: Net(hidden_1=256, hidden_2=128, constant_weight): fc1 784->256, fc2 256->128, fc3 128->10, ReLU,
Dropout(0.2) after fc1 and fc2; helpers._get_loss_acc: nn.CrossEntropyLoss(), Adam(lr=0.001), 2 epochs,
zero_grad/forward/loss/backward/step per batch, batch 100; images ToTensor() in 0..1.
Bug: constant_weight=1 (the notebook's "all ones" model).
Fix (--fixed): the solution's weights_init_normal: weight ~ N(0, 1/sqrt(in_features)), bias 0.
Ported: synthetic Fashion-MNIST-like 28x28 images in 0..1 (10 classes, each a class template of bars and
blocks, blurred by noise); 6,000 training images (Fashion-MNIST's 48,000), 1,000 validation images.
Printed metric (plain python): buggy validation accuracy 10.3%, last batch loss 3823 (first 2.303); fixed
100.0%, last batch loss 0.000.
"""
# expect: cause=initialization
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--fixed", action="store_true", help="normal init with std 1/sqrt(n)")
args = parser.parse_args()
torch.manual_seed(0)

g = torch.Generator().manual_seed(1)
templates = (torch.rand(10, 28, 28, generator=g) > 0.6).float()


def make(n):
    y = torch.randint(0, 10, (n,), generator=g)
    x = 0.6 * templates[y] + 0.4 * torch.rand(n, 28, 28, generator=g)
    return x.unsqueeze(1).clamp(0, 1), y


xtr, ytr = make(6000)
xva, yva = make(1000)


class Net(nn.Module):
    def __init__(self, hidden_1=256, hidden_2=128, constant_weight=None):
        super(Net, self).__init__()
        self.fc1 = nn.Linear(28 * 28, hidden_1)
        self.fc2 = nn.Linear(hidden_1, hidden_2)
        self.fc3 = nn.Linear(hidden_2, 10)
        self.dropout = nn.Dropout(0.2)
        if constant_weight is not None:
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.constant_(m.weight, constant_weight)
                    nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = x.view(-1, 28 * 28)
        x = F.relu(self.fc1(x))
        x = self.dropout(x)
        x = F.relu(self.fc2(x))
        x = self.dropout(x)
        x = self.fc3(x)
        return x


def weights_init_normal(m):
    classname = m.__class__.__name__
    if classname.find('Linear') != -1:
        n = m.in_features
        y = (1.0 / n ** 0.5)
        m.weight.data.normal_(0, y)
        m.bias.data.fill_(0)


if args.fixed:
    model = Net()
    model.apply(weights_init_normal)
else:
    model = Net(constant_weight=1)

n_epochs = 2
learning_rate = 0.001
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), learning_rate)
loss_batch = []
for epoch in range(1, n_epochs + 1):
    perm = torch.randperm(len(xtr))
    for i in range(0, len(xtr), 100):
        data, target = xtr[perm[i:i + 100]], ytr[perm[i:i + 100]]
        optimizer.zero_grad()
        output = model(data)
        loss = criterion(output, target)
        loss.backward()
        optimizer.step()
        loss_batch.append(loss.item())

model.eval()
with torch.no_grad():
    valid_acc = (model(xva).argmax(1) == yva).float().mean().item()
print(f"init_constant_ones_udacity_mlp: {'normal 1/sqrt(n)' if args.fixed else 'all ones'}, "
      f"validation accuracy {100 * valid_acc:.3f}%, last batch loss {loss_batch[-1]:.3f}, "
      f"first {loss_batch[0]:.4g}")

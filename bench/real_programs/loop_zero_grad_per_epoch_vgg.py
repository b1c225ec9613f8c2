"""A VGG11-BN CIFAR-10 lab trained with optimizer.zero_grad() called once per epoch instead of once per batch.

Source: https://github.com/heartcored98/Standalone-DeepLearning/issues/11  (GitHub issue on Lec5/
Lab7_CIFAR-10_with_CNN.ipynb: "epoch 당 zero_grad()를 한 번 사용하시던데요! loss.backward()를 사용할 때마다
그 전에 zero_grad()를 해야 하는게 아닌가요??" (you call zero_grad() once per epoch; shouldn't it come before
every backward?); the author: "앗 그런 실수를 했었군요" (oops, I made that mistake) and fixed it in every lab)
Program: the notebook's CNN('VGG11', use_bn=True): cfg VGG11 convs 3x3 pad 1 + BatchNorm2d + ReLU, MaxPool
2x2, classifier Linear(512, 256), ReLU, Linear(256, 10); nn.CrossEntropyLoss(); optim.RMSprop(lr=0.0015,
weight_decay=1e-5) (the notebook's args.lr; its sweep then tries 1e-4 and 1e-5); train(): `net.train();
optimizer.zero_grad()` then, per batch, `outputs = net(inputs); loss = criterion(outputs, labels);
loss.backward(); optimizer.step()`; validate() under net.eval() and torch.no_grad().
Bug: zero_grad() runs once at the top of train(), so within an epoch every step uses the sum of all the
gradients of the epoch so far.
Fix (--fixed): optimizer.zero_grad() before every forward (the author's fix).
Ported: synthetic CIFAR-like 3x32x32 images in -1..1 (Normalize(0.5, 0.5)), 10 classes told by a faint
class colour and a class blob position under unit noise; 1,280 training / 512 validation images (CIFAR's
40k / 10k); batch 64 (the lab's 256); 6 epochs (the lab's 10); VGG11's channel widths divided by 8
(64..512 -> 8..64) and the classifier's Linear(512, 256) -> Linear(64, 32) to run on one CPU thread.
Printed metric (plain python), last epoch: buggy train acc 51.6% (train loss 0.96); fixed 99.5% (0.06).
(Val accuracy is ~40% for both: 1,280 images overfit; at lr 1e-4 the bug does not hurt, 98.8% vs 96.2%.)
"""
# expect: cause=training_loop
import argparse

import torch
import torch.nn as nn
import torch.optim as optim

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=6)
parser.add_argument("--lr", type=float, default=0.0015)
parser.add_argument("--fixed", action="store_true", help="zero_grad() before every batch")
args = parser.parse_args()

seed = 123
torch.manual_seed(seed)

W = 8  # width divisor
cfg = {'VGG11': [64 // W, 'M', 128 // W, 'M', 256 // W, 256 // W, 'M', 512 // W, 512 // W, 'M',
                 512 // W, 512 // W, 'M']}


def make(n, g):
    y = torch.randint(0, 10, (n,), generator=g)
    x = 1.0 * torch.randn(n, 3, 32, 32, generator=g)
    colours = torch.rand(10, 3, generator=g) * 2 - 1
    for i in range(n):
        c = int(y[i])
        x[i] += 0.3 * colours[c].view(3, 1, 1)
        r, q = 4 + 6 * (c // 4), 4 + 6 * (c % 4)
        x[i, :, r:r + 6, q:q + 6] += 0.5
    return x.clamp(-1, 1), y


g = torch.Generator().manual_seed(0)
xtr, ytr = make(1280, g)
xva, yva = make(512, g)


class CNN(nn.Module):

    def __init__(self, model_code, in_channels, out_dim, act, use_bn):
        super(CNN, self).__init__()

        if act == 'relu':
            self.act = nn.ReLU()
        else:
            raise ValueError("Not a valid activation function code")

        self.layers = self._make_layers(model_code, in_channels, use_bn)
        self.classifer = nn.Sequential(nn.Linear(512 // W, 256 // W),
                                       self.act,
                                       nn.Linear(256 // W, out_dim))

    def forward(self, x):
        x = self.layers(x)
        x = x.view(x.size(0), -1)
        x = self.classifer(x)
        return x

    def _make_layers(self, model_code, in_channels, use_bn):
        layers = []
        for x in cfg[model_code]:
            if x == 'M':
                layers += [nn.MaxPool2d(kernel_size=2, stride=2)]
            else:
                layers += [nn.Conv2d(in_channels=in_channels, out_channels=x, kernel_size=3, stride=1,
                                     padding=1)]
                if use_bn:
                    layers += [nn.BatchNorm2d(x)]
                layers += [self.act]
                in_channels = x
        return nn.Sequential(*layers)


def train(net, optimizer, criterion, bs=64):
    net.train()
    optimizer.zero_grad()
    perm = torch.randperm(len(xtr))
    correct = total = 0
    train_loss = 0.0
    n = 0
    for i in range(0, len(xtr), bs):
        idx = perm[i:i + bs]
        inputs, labels = xtr[idx], ytr[idx]
        if args.fixed:
            optimizer.zero_grad()
        outputs = net(inputs)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()
        train_loss += loss.item()
        n += 1
        _, predicted = torch.max(outputs.data, 1)
        total += labels.size(0)
        correct += (predicted == labels).sum().item()
    return train_loss / n, 100 * correct / total


def validate(net, criterion):
    net.eval()
    with torch.no_grad():
        outputs = net(xva)
        loss = criterion(outputs, yva).item()
        acc = 100 * (outputs.argmax(1) == yva).float().mean().item()
    return loss, acc


net = CNN('VGG11', 3, 10, 'relu', True)
criterion = nn.CrossEntropyLoss()
optimizer = optim.RMSprop(net.parameters(), lr=args.lr, weight_decay=0.00001)
for epoch in range(args.epochs):
    train_loss, train_acc = train(net, optimizer, criterion)
    val_loss, val_acc = validate(net, criterion)
    print(f'Epoch {epoch}, Acc(train/val): {train_acc:2.2f}/{val_acc:2.2f}, '
          f'Loss(train/val) {train_loss:2.2f}/{val_loss:2.2f}')

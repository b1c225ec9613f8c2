"""LeNet (ReLU) on CIFAR10-like images with Adam and a large weight_decay: accuracy stays at 10%.

Source: https://stackoverflow.com/questions/61633868  (Stack Overflow: "My train accuracy remains at 10% when I
add weight_decay parameter to my optimizer in PyTorch. I am using CIFAR10 dataset and LeNet CNN model")
Bug: the question's LeNet_ReLU trains with `optim.Adam(net.parameters())`, but once `weight_decay` is added the
accuracy "remains at 10% through all the epochs". Adam's weight_decay is an L2 term added to the gradient,
which Adam then normalises: a large coefficient makes every step pull the weights to zero, the ReLU
units die and the net predicts one class. The value used here, 0.1, is this port's: the question's
text as stored does not show its optimizer line.
Fix (--fixed): Adam without weight_decay, the question's working configuration.
Model, batch size 128 and Adam's default lr are the question's; data synthetic (10 noisy 3x32x32 templates).
Printed metric (plain python): train accuracy of the last epoch, 0.113 buggy, 0.999 fixed.
"""
# ruff: noqa: E501
# expect: cause=learning_rate
import argparse

import torch
from torch import nn, optim

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=8)
parser.add_argument("--fixed", action="store_true", help="no weight_decay")
args = parser.parse_args()
torch.manual_seed(0)


class LeNet_ReLU(nn.Module):      # verbatim from the question
    def __init__(self):
        super().__init__()
        self.cnn_model = nn.Sequential(nn.Conv2d(3, 6, 5), nn.ReLU(), nn.AvgPool2d(2, stride=2),
                                       nn.Conv2d(6, 16, 5), nn.ReLU(), nn.AvgPool2d(2, stride=2))
        self.fc_model = nn.Sequential(nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                                      nn.Linear(84, 10))

    def forward(self, x):
        x = self.cnn_model(x)
        x = x.view(x.size(0), -1)
        x = self.fc_model(x)
        return x


templates = torch.nn.functional.avg_pool2d(torch.rand(10, 3, 32, 32), 5, 1, 2)
templates = (templates - templates.amin()) / (templates.amax() - templates.amin())
y_all = torch.randint(0, 10, (2560,))
x_all = (templates[y_all] + 0.3 * torch.randn(2560, 3, 32, 32)).clamp(0, 1)   # ToTensor(): 0..1

net = LeNet_ReLU()
loss_fn = nn.CrossEntropyLoss()
opt = optim.Adam(net.parameters()) if args.fixed else optim.Adam(net.parameters(), weight_decay=0.1)
batch_size = 128

for epoch in range(args.epochs):
    perm = torch.randperm(len(x_all))
    correct = 0
    for i in range(0, len(x_all), batch_size):
        idx = perm[i:i + batch_size]
        opt.zero_grad()
        out = net(x_all[idx])
        loss = loss_fn(out, y_all[idx])
        loss.backward()
        opt.step()
        correct += (out.argmax(1) == y_all[idx]).sum().item()
    acc = correct / len(x_all)
print(f"lr_adam_weight_decay_lenet_so: {'no weight_decay' if args.fixed else 'weight_decay=0.1'}, "
      f"{args.epochs} epochs, last-epoch train accuracy {acc:.3f}")

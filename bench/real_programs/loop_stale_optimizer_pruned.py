"""A pruned CNN fine-tuned with the optimizer built before pruning replaced its layers: nothing trains.

Source: https://github.com/microsoft/nni/issues/4521  (GitHub issue answered by the maintainer)
Bug: the pipeline of NNI's basic_pruners_torch.py: pretrain a VGG-style CNN on CIFAR-10 with
`SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)`, prune half the conv filters by L1
norm, run `ModelSpeedup(...).speedup_model()` (which swaps every pruned layer for a new, smaller module
holding the kept weights), then fine-tune with the SAME optimizer. That optimizer still holds the old,
replaced tensors, so `optimizer.step()` updates parameters the model no longer uses and the fine-tuning
changes nothing: accuracy stays at its post-pruning value.
Fix (--fixed): build a new optimizer over the pruned model's parameters before fine-tuning, as the
maintainer advised ("an easy way is reinitializing a new optimizer"; same fix in
microsoft/nni PR #3844 for examples/model_compress/pruning/basic_pruners_torch.py).
Printed metric (plain python): buggy test accuracy after fine-tuning 0.17 (0.09 after pruning,
0.82 before); fixed 0.82. (Exact values vary slightly with the thread count.)
"""
# expect: cause=training_loop
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=200, help="pretraining + fine-tuning steps")
parser.add_argument("--fixed", action="store_true", help="new optimizer after the speedup")
args = parser.parse_args()

torch.manual_seed(0)

# CIFAR-10-shaped data: 3x32x32 images, 10 classes, normalised per channel as the example's
# transforms.Normalize((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)). Each class is a fixed
# random colour pattern, each image that pattern plus pixel noise, in 0..1 before normalising.
n_train, n_test, n_cls = 2048, 512, 10
templates = torch.rand(n_cls, 3, 32, 32)


def make(n):
    labels = torch.randint(0, n_cls, (n,))
    img = (0.35 * templates[labels] + 0.65 * torch.rand(n, 3, 32, 32)).clamp(0, 1)
    mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
    std = torch.tensor([0.2023, 0.1994, 0.2010]).view(1, 3, 1, 1)
    return (img - mean) / std, labels


x_train, y_train = make(n_train)
x_test, y_test = make(n_test)


class VGG(nn.Module):
    """A two-block VGG (conv-BN-ReLU-pool) with a linear classifier, the example's VGG cut down."""

    def __init__(self, c1=16, c2=32):
        super().__init__()
        self.conv1 = nn.Conv2d(3, c1, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(c1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(c2)
        self.pool = nn.MaxPool2d(4)
        self.fc = nn.Linear(c2 * 2 * 2, n_cls)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = self.pool(torch.relu(self.bn2(self.conv2(x))))
        return self.fc(x.flatten(1))


def accuracy(model):
    model.eval()
    with torch.no_grad():
        acc = (model(x_test).argmax(1) == y_test).float().mean().item()
    model.train()
    return acc


def train(model, optimizer, steps):
    criterion = nn.CrossEntropyLoss()
    for _ in range(steps):
        idx = torch.randint(0, n_train, (64,))
        loss = criterion(model(x_train[idx]), y_train[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def speedup(model, sparsity=0.5):
    """L1-norm filter pruning made physical: replace conv/bn/fc by smaller modules (what speedup does)."""
    def keep(conv):
        k = int(conv.out_channels * (1 - sparsity))
        return conv.weight.detach().abs().sum((1, 2, 3)).argsort(descending=True)[:k].sort().values

    k1, k2 = keep(model.conv1), keep(model.conv2)
    new = VGG(len(k1), len(k2))
    with torch.no_grad():
        new.conv1.weight.copy_(model.conv1.weight[k1])
        new.conv1.bias.copy_(model.conv1.bias[k1])
        new.conv2.weight.copy_(model.conv2.weight[k2][:, k1])
        new.conv2.bias.copy_(model.conv2.bias[k2])
        for bn_new, bn_old, k in ((new.bn1, model.bn1, k1), (new.bn2, model.bn2, k2)):
            for name in ("weight", "bias", "running_mean", "running_var"):
                getattr(bn_new, name).copy_(getattr(bn_old, name)[k])
        cols = (k2.view(-1, 1) * 4 + torch.arange(4)).flatten()
        new.fc.weight.copy_(model.fc.weight[:, cols])
        new.fc.bias.copy_(model.fc.bias)
    # ModelSpeedup modifies the model in place: its submodules are swapped for the new ones.
    for name in ("conv1", "bn1", "conv2", "bn2", "fc"):
        setattr(model, name, getattr(new, name))


model = VGG()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)

pretrain_steps = args.steps // 2
train(model, optimizer, pretrain_steps)
acc_pretrained = accuracy(model)

speedup(model)
acc_pruned = accuracy(model)

if args.fixed:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
final_loss = train(model, optimizer, args.steps - pretrain_steps)
acc_finetuned = accuracy(model)

print(f"loop_stale_optimizer_pruned: {'new' if args.fixed else 'stale'} optimizer, accuracy pretrained "
      f"{acc_pretrained:.3f}, after pruning {acc_pruned:.3f}, after fine-tuning {acc_finetuned:.3f} "
      f"(final train loss {final_loss:.3f})")

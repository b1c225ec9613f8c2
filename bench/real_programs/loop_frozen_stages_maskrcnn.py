"""pytorch-mask-rcnn's staged training: stage "4+" meant to train C4 and C5, which stay frozen from stage "heads".

Source: https://github.com/multimodallearning/pytorch-mask-rcnn/issues/20  (GitHub issue "Potential bug on setting
trainable layers for each stage": set_trainable only sets requires_grad=False on the layers that do not match;
"If you run first stage, C1-C5 are all requires_grad=False; then you enter the second stage, 4+ ... the flag of C4,
C5 doesn't change; they are still requires_grad=False. So after `if xxx`, there should be an
`else: param[1].requires_grad = True`", with the reporter's fixed fork linked)
Program: model.py MaskRCNN.set_trainable and train_model as at 809abba: per stage, set_trainable(layers regex),
then optim.SGD([{params: trainables without bn, weight_decay: 1e-4}, {params: trainable bn}], lr, momentum=0.9)
over the parameters that require grad; stage 1 "heads" (r"(fpn.*)|(rpn.*)|(classifier.*)|(mask.*)"), stage 2
"4+" (r"(C4.*)|(C5.*)|" + heads), at config.LEARNING_RATE 0.001 (samples/coco.py's schedule, shortened).
Bug: in stage "4+" C4 and C5 keep requires_grad=False from stage "heads": they are left out of the optimizer
and only the head trains, on the backbone's untrained features.
Fix (--fixed): the issue's `else: param.requires_grad = True`.
Ported: the backbone is 5 small conv stages C1..C5 trained from scratch (no ImageNet weights here) and the
"heads" a classifier (named classifier.*) over a 4-class synthetic image task; stage heads 100 steps, 4+ 600.
Printed metric (plain python): test accuracy after each stage.
"""
# ruff: noqa: E501
# expect: cause=training_loop
import argparse
import re

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--fixed", action="store_true", help="set_trainable also sets requires_grad=True")
args = parser.parse_args()
torch.manual_seed(0)


def stage(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.C1, self.C2, self.C3 = stage(1, 8), stage(8, 16), stage(16, 16)
        self.C4 = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())
        self.C5 = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 4))

    def forward(self, x):
        return self.classifier(self.C5(self.C4(self.C3(self.C2(self.C1(x))))))

    def set_trainable(self, layer_regex):
        for param in self.named_parameters():
            layer_name = param[0]
            trainable = bool(re.fullmatch(layer_regex, layer_name))
            if not trainable:
                param[1].requires_grad = False
            elif args.fixed:
                param[1].requires_grad = True


def make(n):
    """4 classes: an L-shaped corner in one of 4 orientations, at a random place, in noise."""
    y = torch.randint(0, 4, (n,))
    x = 0.3 * torch.randn(n, 1, 32, 32)
    for i in range(n):
        r, c = torch.randint(4, 24, (2,)).tolist()
        patch = torch.zeros(6, 6)
        patch[0, :] = 2.5
        patch[:, 0] = 2.5
        x[i, 0, r:r + 6, c:c + 6] += torch.rot90(patch, int(y[i]))
    return x, y


xs, ys = make(2000)
xt, yt = make(500)
model = Net()
layer_regex = {"heads": r"(classifier.*)",
               "4+": r"(C4.*)|(C5.*)|(classifier.*)"}


def train_model(layers, steps, learning_rate=0.001):
    model.set_trainable(layer_regex[layers])
    trainables_wo_bn = [p for n, p in model.named_parameters() if p.requires_grad and "1.weight" not in n
                        and "1.bias" not in n or (p.requires_grad and n.startswith("classifier"))]
    trainables_only_bn = [p for n, p in model.named_parameters() if p.requires_grad
                          and not n.startswith("classifier") and ("1.weight" in n or "1.bias" in n)]
    optimizer = optim.SGD([{"params": trainables_wo_bn, "weight_decay": 1e-4},
                           {"params": trainables_only_bn}], lr=learning_rate, momentum=0.9)
    model.train()
    for step in range(steps):
        idx = torch.randint(0, len(xs), (16,))
        optimizer.zero_grad()
        loss = F.cross_entropy(model(xs[idx]), ys[idx])
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        acc = (model(xt).argmax(1) == yt).float().mean().item()
    print(f"stage {layers}: {sum(p.numel() for g in optimizer.param_groups for p in g['params'])} trained "
          f"parameters, last loss {loss.item():.3f}, test accuracy {acc:.3f}")


model.set_trainable(r".*")
train_model("heads", 100)
train_model("4+", 600)

"""BYOL-A's audio encoder stays frozen when fine-tuned: set_trainable(True) cannot undo set_trainable(False).

Source: https://github.com/nttcslab/byol-a/issues/7  (GitHub issue, labelled bug, by the author: "Model
parameters cannot be trainable once they become requires_grad=False ... `if p.requires_grad` has to be
removed", in byol_a/models.py NetworkCommonMixIn.set_trainable)
Program: byol_a/models.py: AudioNTT2020 (3 x [Conv2d 3x3, BatchNorm2d, ReLU, MaxPool2d 2], fc = Linear, ReLU,
Dropout(0.3), Linear, ReLU; max + mean over time) with its set_trainable:
`for p in self.parameters(): if p.requires_grad: p.requires_grad = trainable`. A downstream task uses it as
the issue describes: the encoder is first frozen (set_trainable(False), a linear-evaluation phase that trains
a Linear head with Adam), then released for fine-tuning with set_trainable(True) and Adam over the encoder and
the head.
Bug: set_trainable(True) skips every parameter whose requires_grad is already False, so the fine-tuning phase
trains the head alone; the encoder's weights never change.
Fix (--fixed): the issue's: the `if p.requires_grad` test removed.
Ported: synthetic log-mel spectrograms (1 x 32 mels x 48 frames, n_mels 64 -> 32) of 6 classes (each a
sweep or chord of mel bands at a class-specific time, under noise); conv channels 64 -> 16, d 512 -> 64
(to run on one CPU thread); 960 training / 480 test clips; batch 32; linear phase 60 steps, fine-tuning 240
steps, Adam(lr=1e-3); the encoder is randomly initialised (no pretrained BYOL-A weights here).
Printed metric (plain python): test accuracy after fine-tuning: buggy 0.198 (390 trainable values, the head;
linear phase 0.190), fixed 0.865 (13,606 trainable values); chance 1/6.
"""
# expect: cause=training_loop
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--fixed", action="store_true", help="set_trainable without the requires_grad test")
args = parser.parse_args()
torch.manual_seed(0)


class NetworkCommonMixIn:
    def set_trainable(self, trainable=False):
        for p in self.parameters():
            if p.requires_grad or args.fixed:
                p.requires_grad = trainable


class AudioNTT2020Task6(nn.Module, NetworkCommonMixIn):
    def __init__(self, n_mels, d, c=16):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, c, 3, stride=1, padding=1), nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(2, stride=2),
            nn.Conv2d(c, c, 3, stride=1, padding=1), nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(2, stride=2),
            nn.Conv2d(c, c, 3, stride=1, padding=1), nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(2, stride=2),
        )
        self.fc = nn.Sequential(
            nn.Linear(c * (n_mels // (2**3)), d), nn.ReLU(), nn.Dropout(p=0.3), nn.Linear(d, d), nn.ReLU(),
        )
        self.d = d

    def forward(self, x):
        x = self.features(x)
        x = x.permute(0, 3, 2, 1)
        B, T, D, C = x.shape
        x = x.reshape((B, T, C * D))
        x = self.fc(x)
        return x


class AudioNTT2020(AudioNTT2020Task6):
    def __init__(self, n_mels=32, d=64):
        super().__init__(n_mels=n_mels, d=d)

    def forward(self, x):
        x = super().forward(x)
        (x1, _) = torch.max(x, dim=1)
        x2 = torch.mean(x, dim=1)
        return x1 + x2


class Classifier(nn.Module):
    def __init__(self, encoder, n_classes):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(encoder.d, n_classes)

    def forward(self, x):
        return self.head(self.encoder(x))


g = torch.Generator().manual_seed(1)
K = 6


def make(n):
    y = torch.randint(0, K, (n,), generator=g)
    x = torch.randn(n, 1, 32, 48, generator=g)
    for i in range(n):
        c = int(y[i])
        t0 = int(torch.randint(0, 24, (1,), generator=g))
        for k in range(12):                      # a sweep: rising for even classes, falling for odd
            m = (4 + (c // 2) * 3 + k) if c % 2 == 0 else (26 - (c // 2) * 3 - k)
            x[i, 0, m % 32, t0 + k] += 2.5
    return x, y


xtr, ytr = make(960)
xte, yte = make(480)

model = Classifier(AudioNTT2020(), K)
criterion = nn.CrossEntropyLoss()


def run(optimizer, steps):
    model.train()
    for s in range(steps):
        idx = torch.randint(0, len(xtr), (32,), generator=g)
        optimizer.zero_grad()
        loss = criterion(model(xtr[idx]), ytr[idx])
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        return (model(xte).argmax(1) == yte).float().mean().item(), loss.item()


model.encoder.set_trainable(False)            # linear evaluation: the head alone
acc_lin, _ = run(torch.optim.Adam(model.head.parameters(), lr=1e-3), 60)
model.encoder.set_trainable(True)             # fine-tuning: encoder and head
n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
acc_ft, last = run(torch.optim.Adam(model.parameters(), lr=1e-3), 240)
print(f"loop_set_trainable_noop_byola: {'fixed' if args.fixed else 'buggy'} set_trainable, trainable params "
      f"{n_trainable}, test acc after linear phase {acc_lin:.3f}, after fine-tuning {acc_ft:.3f}, "
      f"last loss {last:.3f}")

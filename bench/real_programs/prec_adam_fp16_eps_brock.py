"""A CNN trained entirely in float16 with Adam's default eps=1e-8 (which rounds to 0 in half) turns its weights to inf/NaN.

Source: https://discuss.pytorch.org/t/adam-half-precision-nans/1765 (PyTorch forum, "Adam+Half Precision = NaNs?":
"I've been running into the sudden appearance of NaNs when I attempt to train using Adam and Half (float16)
precision; my nets train just fine on half precision with SGD+nesterov momentum, and they train just fine with
single precision (float32) and Adam"; answer by Adam Paszke: "It's probably a 0 division somewhere. Have you tried
using a much larger eps (say 1e-4)? The default 1e-8 is rounded to 0 in half precision."; the poster: "it looks
like eps was the culprit after all").
Program: a CIFAR-style conv net (the thread does not give the nets; a small conv-BN-ReLU stack), the model and
inputs cast with .half(), torch.optim.Adam(model.parameters(), lr=1e-3) with the default eps, CrossEntropyLoss,
batch 64.
Bug: in float16, eps=1e-8 becomes 0 and (1-beta2)*g^2 underflows to 0 for |g| below ~8e-3, so Adam's
denominator sqrt(v_hat)+eps is exactly 0 for many weights and the update g/0 is +-inf (0/0 = NaN for zero
gradients); the weights become inf/NaN at the first step and the loss is NaN from then on.
Fix (--fixed): Adam(..., eps=1e-4), as the answer suggests (representable in half).
Ported: CIFAR-10 -> synthetic 16x16x3 images (CPU float16 convolutions are slow), 10 classes, class-dependent colour/pattern means plus noise
(noise std 2); two conv blocks (16, 32 channels); 60 steps; CPU float16.
Printed metric (plain python): buggy loss 2.586 -> nan (NaN losses 59/60), acc 0.102, non-finite weights 10266/10266;
fixed loss 2.586 -> 0.0753, 0 NaN, acc 1.000, 0 non-finite weights.
"""
# expect: cause=precision
# ruff: noqa: E501
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--fixed", action="store_true", help="Adam eps=1e-4")
args = parser.parse_args()
torch.manual_seed(0)

n_cls = 10
protos = torch.randn(n_cls, 3, 4, 4)


def batch(bs=64):
    y = torch.randint(0, n_cls, (bs,))
    x = F.interpolate(protos[y], size=(16, 16), mode="nearest") + 2.0 * torch.randn(bs, 3, 16, 16)
    return x.half(), y


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.MaxPool2d(2))


model = nn.Sequential(block(3, 16), block(16, 32), nn.Flatten(), nn.Linear(32 * 4 * 4, n_cls))
model = model.half()
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-4) if args.fixed else \
    torch.optim.Adam(model.parameters(), lr=1e-3)

losses, accs = [], []
for step in range(60):
    x, y = batch()
    out = model(x)
    loss = criterion(out, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    accs.append((out.argmax(1) == y).float().mean().item())

bad = sum(int((~torch.isfinite(p)).sum()) for p in model.parameters())
n = sum(p.numel() for p in model.parameters())
nan = sum(1 for v in losses if v != v)
print(f"prec_adam_fp16_eps_brock: eps={optimizer.param_groups[0]['eps']}, loss first {losses[0]:.4g}, "
      f"last {losses[-1]:.4g}, NaN losses {nan}/{len(losses)}, acc last 10 steps {sum(accs[-10:]) / 10:.3f}, "
      f"non-finite weights {bad}/{n}")

"""A Keras-style MLP on Fashion-MNIST-like images fed raw 0..255 pixels: it barely learns.

Source: https://stats.stackexchange.com/questions/367057/bad-performance-with-relu-activation-function-on-mnist-data-set
(Cross Validated question; the asker's edit and the comments give the cause)
Bug: the 28x28 images go into Dense(128, relu) -> Dense(128, relu) -> Dense(10, softmax) with
categorical_crossentropy and Adam as raw pixel values 0..255; the first layer's pre-activations are in the
hundreds, the softmax saturates and validation accuracy stays around 20%.
Fix (--fixed): scale the pixels to 0..1 (x / 255), as the asker found; nothing else changes.
Printed metric (plain python): buggy val_acc 0.271 (final loss 12.1);
fixed val_acc 1.000 (final loss 0.0006); the source reports ~20% vs ~85%.
"""
# expect: cause=input_data
import argparse
import math

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--fixed", action="store_true", help="divide the pixels by 255")
args = parser.parse_args()

torch.manual_seed(0)

# Fashion-MNIST-like data: 10 classes, each a smooth 28x28 silhouette on a black background, drawn with
# a random brightness, a small shift and pixel noise, rounded to integers 0..255 like the uint8 images.
n_train, n_test = 6000, 1000
yy, xx = torch.meshgrid(torch.arange(28.0), torch.arange(28.0), indexing="ij")
protos = []
for _ in range(10):
    img = torch.zeros(28, 28)
    for _ in range(4):                       # a few overlapping blobs make one garment-like shape
        cy, cx = 6 + 16 * torch.rand(2)
        sy, sx = 2 + 5 * torch.rand(2)
        img += torch.exp(-((yy - cy) / sy) ** 2 - ((xx - cx) / sx) ** 2)
    protos.append(img / img.max())
protos = torch.stack(protos)


def make(n):
    labels = torch.randint(0, 10, (n,))
    imgs = protos[labels]
    shift = torch.randint(-2, 3, (2,))
    imgs = torch.roll(imgs, shifts=(int(shift[0]), int(shift[1])), dims=(1, 2))
    bright = 140 + 115 * torch.rand(n, 1, 1)
    imgs = imgs * bright + 40 * torch.randn(n, 28, 28) * (imgs > 0.1)
    return imgs.clamp(0, 255).round().reshape(n, 784), labels


x_train, y_train = make(n_train)
x_test, y_test = make(n_test)
if args.fixed:
    x_train, x_test = x_train / 255.0, x_test / 255.0
y_train_1h = nn.functional.one_hot(y_train, 10).float()      # keras.utils.to_categorical


def dense(n_in, n_out):
    # Keras Dense default: glorot_uniform kernel, zero bias
    layer = nn.Linear(n_in, n_out)
    limit = math.sqrt(6.0 / (n_in + n_out))
    nn.init.uniform_(layer.weight, -limit, limit)
    nn.init.zeros_(layer.bias)
    return layer


model = nn.Sequential(
    dense(784, 128), nn.ReLU(),
    dense(128, 128), nn.ReLU(),
    dense(128, 10), nn.Softmax(dim=1),
)
optimizer = torch.optim.Adam(model.parameters(), lr=0.001)   # Keras 'adam'
eps = 1e-7                                                    # Keras backend epsilon

batch = 32                                                    # Keras fit default
perm = torch.randperm(n_train)
pos = 0
for _ in range(args.steps):
    if pos + batch > n_train:
        perm, pos = torch.randperm(n_train), 0
    idx = perm[pos:pos + batch]
    pos += batch
    p = model(x_train[idx])
    # categorical_crossentropy on softmax probabilities
    loss = -(y_train_1h[idx] * p.clamp(eps, 1 - eps).log()).sum(1).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    val_acc = (model(x_test).argmax(1) == y_test).float().mean().item()
setup = "pixels / 255" if args.fixed else "raw pixels 0..255"
print(f"data_fashion_mnist_unscaled: {setup}, {args.steps} steps, final loss {loss.item():.4g}, "
      f"val_acc {val_acc:.3f}")

"""The Keras-blog single-layer autoencoder trained on raw 0..255 pixels under binary crossentropy.

Source: https://github.com/keras-team/keras/issues/3642  (GitHub issue "Autoencoder tutorial not
reproducible", answered by fchollet; the tutorial is https://blog.keras.io/building-autoencoders-in-keras.html)
Bug: the reporter copied the tutorial's model (784 -> Dense(32, relu) -> Dense(784, sigmoid), adadelta,
binary_crossentropy, 50 epochs of batch 256) but left off the `x_train.astype('float32') / 255.` step, so
the inputs are 0..255 and so are the "probability" targets of the crossentropy: the loss goes negative
without bound (a target above 1 rewards p -> 1 - eps) and the reconstructions are "way worse".
Fix (--fixed): fchollet's answer, "you should not be feeding integers in the 0-255 range in a NN. You need
to cast your data to float and normalize it": divide the pixels by 255.
Printed metric (plain python): reconstruction MSE on the 0..1 scale after 300 steps (the blog runs 50
epochs), buggy 0.2924 (loss -344.2); fixed 0.0546 (loss 0.2078).
"""
# expect: cause=input_data

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--fixed", action="store_true", help="pixels divided by 255")
args = parser.parse_args()

torch.manual_seed(0)

# MNIST-like digits: 28x28 uint8-valued images, black background, one of ten stroke templates per class,
# shifted by up to 2 pixels, thickness and intensity varying; values 0..255 as mnist.load_data() gives.
n = 6000
templates = torch.zeros(10, 28, 28)
for c in range(10):
    g = torch.Generator().manual_seed(100 + c)
    for _ in range(4):                              # four strokes per template
        r0, c0 = torch.randint(6, 22, (2,), generator=g).tolist()
        r1, c1 = torch.randint(6, 22, (2,), generator=g).tolist()
        for t in torch.linspace(0, 1, 30):
            r, cc = round(r0 + (r1 - r0) * t.item()), round(c0 + (c1 - c0) * t.item())
            templates[c, r - 1:r + 1, cc - 1:cc + 1] = 1.0
labels = torch.randint(0, 10, (n,))
imgs = templates[labels]
shifts = torch.randint(-2, 3, (n, 2))
imgs = torch.stack([torch.roll(im, (int(s[0]), int(s[1])), dims=(0, 1))
                    for im, s in zip(imgs, shifts, strict=True)])
imgs = imgs * (0.7 + 0.3 * torch.rand(n, 1, 1)) + 0.05 * torch.rand(n, 28, 28) * (imgs > 0)
x_train = (imgs.clamp(0, 1) * 255).round().reshape(n, 784)          # integers 0..255

if args.fixed:
    x_train = x_train / 255.0

encoding_dim = 32
autoencoder = nn.Sequential(nn.Linear(784, encoding_dim), nn.ReLU(),
                            nn.Linear(encoding_dim, 784), nn.Sigmoid())
for m in autoencoder:                               # Keras Dense defaults: glorot_uniform, zero bias
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)
# Keras 'adadelta' of the time: lr=1.0, rho=0.95, epsilon=1e-8
optimizer = torch.optim.Adadelta(autoencoder.parameters(), lr=1.0, rho=0.95, eps=1e-8)
eps = 1e-7

for _ in range(args.steps):
    idx = torch.randint(0, n, (256,))
    x = x_train[idx]
    p = autoencoder(x).clamp(eps, 1 - eps)
    loss = -(x * p.log() + (1 - x) * (1 - p).log()).mean()              # Keras binary_crossentropy
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    decoded = autoencoder(x_train[:1000])           # the sigmoid output is an intensity in 0..1
    truth = imgs.clamp(0, 1).reshape(n, 784)[:1000]
    mse = (decoded - truth).pow(2).mean().item()
print(f"autoencoder_raw_pixels: {args.steps} steps, final loss {loss.item():.4g}, "
      f"reconstruction MSE (0..1 scale) {mse:.4f}")

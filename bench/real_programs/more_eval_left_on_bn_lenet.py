"""d2l's LeNet with batch normalization (lr 1.0) trains in eval mode after the first test-accuracy check.

Source: https://github.com/d2l-ai/d2l-en/pull/1110  (pull request "[PyTorch] Set net.eval and net.train
explicitly" on the Dive into Deep Learning book, with its review comment; the model is the book's
chapter_convolutional-modern/batch-norm "concise" LeNet-BN trained with train_ch6)
Bug: the PR adds `net.eval()` to `evaluate_accuracy_gpu`, which `train_ch6` calls at the end of every
epoch; as the review says, "once you switch to net.eval(), you need to switch back to net.train() in the
training loop". Without that, every epoch after the first trains with the BatchNorm layers in eval mode:
they normalize with the running statistics frozen at the end of epoch 1 instead of the batch's, and no
longer update them, while SGD runs at the lr of 1.0 that only batch normalization makes usable.
Fix (--fixed): the PR's other half, `net.train()` at the start of each epoch in `train_ch6`.
Printed metric (plain python): buggy test accuracy 0.589 (train loss 0.912); fixed test accuracy 1.000
(train loss 0.051).
"""
# expect: cause=training_loop

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--fixed", action="store_true", help="net.train() at the start of every epoch")
args = parser.parse_args()

torch.manual_seed(0)


# Fashion-MNIST-like: 28x28 grey images in 0..1 (transforms.ToTensor()), ten classes, each a blurred
# silhouette template with random shift, contrast and pixel noise.
def templates():
    g = torch.Generator().manual_seed(7)
    t = torch.zeros(10, 28, 28)
    for c in range(10):
        for _ in range(3):
            r0, c0 = torch.randint(3, 16, (2,), generator=g).tolist()
            h, w = torch.randint(6, 13, (2,), generator=g).tolist()
            t[c, r0:r0 + h, c0:c0 + w] += 0.5 + 0.5 * torch.rand(1, generator=g).item()
    return nn.functional.avg_pool2d(t.unsqueeze(1), 3, 1, 1).squeeze(1).clamp(0, 1)


T = templates()


def make(n):
    y = torch.randint(0, 10, (n,))
    x = T[y]
    s = torch.randint(-3, 4, (n, 2))
    x = torch.stack([torch.roll(im, (int(a), int(b)), dims=(0, 1)) for im, (a, b) in zip(x, s, strict=True)])
    x = x * (0.5 + 0.5 * torch.rand(n, 1, 1)) + 0.25 * torch.rand(n, 28, 28)
    return x.clamp(0, 1).unsqueeze(1), y


X, Y = make(2560)
Xt, Yt = make(1000)
batch_size = 256

net = nn.Sequential(
    nn.Conv2d(1, 6, kernel_size=5), nn.BatchNorm2d(6), nn.Sigmoid(),
    nn.MaxPool2d(kernel_size=2, stride=2),
    nn.Conv2d(6, 16, kernel_size=5), nn.BatchNorm2d(16), nn.Sigmoid(),
    nn.MaxPool2d(kernel_size=2, stride=2), nn.Flatten(),
    nn.Linear(256, 120), nn.BatchNorm1d(120), nn.Sigmoid(),
    nn.Linear(120, 84), nn.BatchNorm1d(84), nn.Sigmoid(),
    nn.Linear(84, 10))


def init_weights(m):                                # train_ch6: xavier_uniform_ on Linear and Conv2d
    if type(m) is nn.Linear or type(m) is nn.Conv2d:
        nn.init.xavier_uniform_(m.weight)


net.apply(init_weights)


def evaluate_accuracy_gpu(net, X, Y):
    net.eval()                                      # Set the model to evaluation mode (the PR's line)
    with torch.no_grad():
        return (net(X).argmax(1) == Y).float().mean().item()


lr = 1.0
optimizer = torch.optim.SGD(net.parameters(), lr=lr)
loss = nn.CrossEntropyLoss()
for _ in range(args.epochs):
    if args.fixed:
        net.train()
    perm = torch.randperm(len(X))
    total, count = 0.0, 0
    for i in range(0, len(X), batch_size):
        idx = perm[i:i + batch_size]
        optimizer.zero_grad()
        y_hat = net(X[idx])
        lo = loss(y_hat, Y[idx])
        lo.backward()
        optimizer.step()
        total += lo.item() * len(idx)
        count += len(idx)
    test_acc = evaluate_accuracy_gpu(net, Xt, Yt)
print(f"eval_left_on_bn_lenet: {args.epochs} epochs, train loss {total / count:.3f}, test acc {test_acc:.3f}")

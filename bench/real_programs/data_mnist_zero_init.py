"""The TensorFlow MNIST tutorial with a sigmoid hidden layer whose weights all start at zero: ~25% accuracy.

Source: https://stats.stackexchange.com/questions/316898/choice-of-initial-value-for-weights-in-tensorflow-mnist-tutorial
(Cross Validated question; the asker's own observation and the linked duplicate's answers)
Bug: both layers are created with tf.zeros (W [784, 100], W2 [100, 10], biases zero); every hidden unit
computes the same sigmoid(0) and receives the same gradient, so the 100 units stay identical copies of one
unit for the whole run and the classifier gets about 25% accuracy.
Fix (--fixed): initialise W2 with tf.random_normal([100, 10]) (stddev 1.0) as the asker did, which breaks
the symmetry (accuracy > 92% in the source); W stays tf.zeros.
Printed metric (plain python): buggy test accuracy ~0.30-0.38 (run to run, thread-dependent rounding);
fixed test accuracy 0.998.
"""
# expect: cause=initialization
import argparse

import torch

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--fixed", action="store_true", help="W2 = tf.random_normal([100, 10])")
args = parser.parse_args()

torch.manual_seed(0)

# MNIST-like data as input_data.read_data_sets gives it: 784 pixels already scaled to [0, 1],
# one-hot labels. Ten stroke-like prototypes, each drawn with random thickness, a shift and noise.
n_train, n_test = 6000, 1000
yy, xx = torch.meshgrid(torch.arange(28.0), torch.arange(28.0), indexing="ij")
protos = []
for _ in range(10):
    img = torch.zeros(28, 28)
    for _ in range(3):                       # three random strokes per digit
        y0, x0, y1, x1 = (4 + 20 * torch.rand(4)).tolist()
        for t in torch.linspace(0, 1, 20):
            cy, cx = y0 + (y1 - y0) * t, x0 + (x1 - x0) * t
            img = torch.maximum(img, torch.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 2.0))
    protos.append(img)
protos = torch.stack(protos)


def make(n):
    labels = torch.randint(0, 10, (n,))
    imgs = protos[labels] * (0.6 + 0.4 * torch.rand(n, 1, 1))
    dy, dx = torch.randint(-1, 2, (2,)).tolist()
    imgs = torch.roll(imgs, shifts=(dy, dx), dims=(1, 2))
    imgs = (imgs + 0.3 * torch.randn(n, 28, 28)).clamp(0, 1)
    return imgs.reshape(n, 784), torch.nn.functional.one_hot(labels, 10).float()


x_train, y_train = make(n_train)
x_test, y_test = make(n_test)

W = torch.zeros(784, 100, requires_grad=True)         # tf.Variable(tf.zeros([784, 100]))
b = torch.zeros(100, requires_grad=True)
if args.fixed:
    W2 = torch.randn(100, 10).requires_grad_()       # tf.Variable(tf.random_normal([100, 10]))
else:
    W2 = torch.zeros(100, 10, requires_grad=True)     # tf.Variable(tf.zeros([100, 10]))
b2 = torch.zeros(10, requires_grad=True)


def forward(x):
    h1 = torch.sigmoid(x @ W + b)
    return h1 @ W2 + b2


optimizer = torch.optim.SGD([W, b, W2, b2], lr=0.5)   # tf.train.GradientDescentOptimizer(0.5)

batch = 100                                           # mnist.train.next_batch(100)
perm = torch.randperm(n_train)
pos = 0
for _ in range(args.steps):
    if pos + batch > n_train:
        perm, pos = torch.randperm(n_train), 0
    idx = perm[pos:pos + batch]
    pos += batch
    logits = forward(x_train[idx])
    # tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y_, logits=y))
    loss = -(y_train[idx] * logits.log_softmax(1)).sum(1).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    acc = (forward(x_test).argmax(1) == y_test.argmax(1)).float().mean().item()
    spread = (W - W[:, :1]).abs().max().item()       # 0 when all hidden units are copies
setup = "W2 random_normal" if args.fixed else "W2 zeros"
print(f"data_mnist_zero_init: {setup}, {args.steps} steps, final loss {loss.item():.4g}, "
      f"test accuracy {acc:.3f}, max weight spread between hidden units {spread:.3g}")

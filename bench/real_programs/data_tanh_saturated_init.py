"""Karpathy's makemore MLP (character-level name model) with unit-Gaussian weights: the tanh layer saturates.

Source: https://github.com/karpathy/nn-zero-to-hero/blob/master/lectures/makemore/makemore_part3_bn.ipynb
(course repository: "makemore part 3: activations & gradients", which fixes the part-2 initialisation)
Bug: the part-2 MLP draws every parameter from torch.randn with no scaling (C, W1 [30, 200], b1, W2, b2);
the hidden pre-activations have std ~ sqrt(30) ~ 5.5 so almost every tanh unit sits at +/-1 with zero
gradient, and the output logits are huge so the initial loss is ~27 instead of log(27) ~ 3.3.
Fix (--fixed): the lecture's fix: W1 * (5/3) / sqrt(n_embd * block_size) (Kaiming gain for tanh),
b1 * 0.01, W2 * 0.01, b2 * 0; data, model, learning rate and batch size unchanged.
Printed metric (plain python): buggy initial loss 21.8, 62% tanh saturated, dev loss 4.28;
fixed initial loss 3.29, dev loss 1.82.
"""
# expect: cause=initialization
import argparse

import torch
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--fixed", action="store_true", help="the lecture's scaled initialisation")
args = parser.parse_args()

torch.manual_seed(0)

# names.txt stand-in: 3000 "names" drawn from a random, peaked character bigram chain over a..z with
# '.' (index 0) as the start/end token, so there is real next-character structure to learn.
vocab_size = 27
trans = torch.softmax(3.0 * torch.randn(vocab_size, vocab_size), dim=1)
trans[0, 0] = 0.0                                   # a name never ends before it starts
trans[1:, 0] *= 0.5                                 # names run for a few characters
trans = trans / trans.sum(1, keepdim=True)
words = []
for _ in range(3000):
    ix, w = 0, []
    while True:
        ix = int(torch.multinomial(trans[ix], 1))
        if ix == 0 or len(w) >= 12:
            break
        w.append(ix)
    words.append(w)

block_size = 3  # context length: how many characters do we take to predict the next one?


def build_dataset(words):
    X, Y = [], []
    for w in words:
        context = [0] * block_size
        for ix in w + [0]:
            X.append(context)
            Y.append(ix)
            context = context[1:] + [ix]  # crop and append
    return torch.tensor(X), torch.tensor(Y)


n1 = int(0.8 * len(words))
Xtr, Ytr = build_dataset(words[:n1])
Xdev, Ydev = build_dataset(words[n1:])

n_embd = 10     # the dimensionality of the character embedding vectors
n_hidden = 200  # the number of neurons in the hidden layer of the MLP
g = torch.Generator().manual_seed(2147483647)  # for reproducibility
C = torch.randn((vocab_size, n_embd), generator=g)
W1 = torch.randn((n_embd * block_size, n_hidden), generator=g)
b1 = torch.randn(n_hidden, generator=g)
W2 = torch.randn((n_hidden, vocab_size), generator=g)
b2 = torch.randn(vocab_size, generator=g)
if args.fixed:
    W1 = W1 * (5 / 3) / ((n_embd * block_size) ** 0.5)
    b1 = b1 * 0.01
    W2 = W2 * 0.01
    b2 = b2 * 0
parameters = [C, W1, b1, W2, b2]
for p in parameters:
    p.requires_grad = True

batch_size = 32
for i in range(args.steps):
    # minibatch construct
    ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
    Xb, Yb = Xtr[ix], Ytr[ix]
    # forward pass
    emb = C[Xb]                                  # embed the characters into vectors
    embcat = emb.view(emb.shape[0], -1)          # concatenate the vectors
    hpreact = embcat @ W1 + b1                   # hidden layer pre-activation
    h = torch.tanh(hpreact)                      # hidden layer
    logits = h @ W2 + b2                         # output layer
    loss = F.cross_entropy(logits, Yb)           # loss function
    if i == 0:
        loss0 = loss.item()
        saturated = (h.abs() > 0.99).float().mean().item()
    # backward pass
    for p in parameters:
        p.grad = None
    loss.backward()
    # update
    lr = 0.1 if i < 100000 else 0.01             # step learning rate decay
    for p in parameters:
        p.data += -lr * p.grad

with torch.no_grad():
    h = torch.tanh(C[Xdev].view(len(Xdev), -1) @ W1 + b1)
    dev_loss = F.cross_entropy(h @ W2 + b2, Ydev).item()
setup = "scaled init" if args.fixed else "unit-Gaussian init"
print(f"data_tanh_saturated_init: {setup}, {args.steps} steps, initial loss {loss0:.3f}, "
      f"saturated tanh at step 0 {saturated:.2f}, dev loss {dev_loss:.4f}")

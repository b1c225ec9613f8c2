"""A fastText-style supervised text classifier trained with per-example SGD on label-sorted lines.

Source: https://github.com/facebookresearch/fastText/issues/74
(GitHub issue; maintainer's answer)
Bug: the training file lists all __label__a lines, then all __label__b, then all __label__c; fastText
processes the examples in file order with per-example SGD, so each class is learnt in a block and then
pushed out by the next one, and precision/recall of the trained model are low.
Fix (--fixed): shuffle the training lines before training, as the maintainer answered; model
(averaged word embeddings -> linear softmax, no bias, dim 100, lr 0.1 decayed linearly to 0) unchanged.
One pass (-epoch 1) over 399 lines keeps the run within 400 per-example steps.
Printed metric (plain python): buggy P@1 0.703 (last class almost never predicted); fixed P@1 0.870.
"""
# expect: cause=input_data
import argparse

import torch

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--fixed", action="store_true", help="shuffle the training lines")
args = parser.parse_args()

torch.manual_seed(0)

# Text lines of 10 tokens from a 300-word vocabulary. Each class has its own 40 topical words, used for
# about half of its tokens; the rest are common words shared by all classes.
n_classes, vocab, n_topic, length = 3, 300, 40, 10
topic = torch.randperm(vocab)[: n_classes * n_topic].reshape(n_classes, n_topic)


def make(n_per_class):
    lines, labels = [], []
    for c in range(n_classes):
        for _ in range(n_per_class):
            own = topic[c][torch.randint(0, n_topic, (length,))]
            common = torch.randint(0, vocab, (length,))
            lines.append(torch.where(torch.rand(length) < 0.5, own, common))
            labels.append(c)
    return torch.stack(lines), torch.tensor(labels)


# The training file as the issue describes it: sorted by label (all a, then all b, then all c).
x_train, y_train = make(133)
x_test, y_test = make(100)
if args.fixed:
    perm = torch.randperm(len(y_train))     # shuf train.txt
    x_train, y_train = x_train[perm], y_train[perm]

dim, lr0 = 100, 0.1                          # fastText supervised defaults
emb = torch.empty(vocab, dim).uniform_(-1.0 / dim, 1.0 / dim).requires_grad_()
out = torch.zeros(n_classes, dim, requires_grad=True)   # fastText zero-initialises the output matrix
optimizer = torch.optim.SGD([emb, out], lr=lr0)

n = len(y_train)
for step in range(args.steps):
    i = step % n                             # examples in file order
    for group in optimizer.param_groups:     # lr decays linearly to 0 over the whole run
        group["lr"] = lr0 * (1.0 - step / args.steps)
    hidden = emb[x_train[i]].mean(0)         # average of the line's word vectors
    logits = out @ hidden
    loss = -logits.log_softmax(0)[y_train[i]]  # softmax loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    pred = (emb[x_test].mean(1) @ out.T).argmax(1)
    p_at_1 = (pred == y_test).float().mean().item()
    counts = torch.bincount(pred, minlength=n_classes).tolist()
order = "shuffled" if args.fixed else "sorted by label"
print(f"data_sorted_labels: {order}, {args.steps} steps, P@1 {p_at_1:.3f}, predictions per class {counts}")

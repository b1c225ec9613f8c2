"""A Keras-style LSTM question classifier whose questions are shuffled but whose labels are not.

Source: https://github.com/DrexelChatbotGroup/DrexelChatbot/issues/15  (GitHub issue "Incomplete
randomization": "gac_training_tests.py randomizes the order of the x data, but not the y data. This
invalidates the required association between them."; fixed in commit fedac35 "Fixed issue #15")
Program: tools/gac_training_tests.py at fedac35^ (the generic-answer classifier of a university chatbot):
questions hashed word by word (adler32 % 5000), pre-padded to 25 tokens, Embedding(5000, 64) -> LSTM(50) ->
Dense(9, softmax), categorical cross-entropy on one-hot labels, RMSprop (Keras defaults: lr 0.001, rho 0.9),
batch 64; the first half of the shuffled set is the test set (percent_test = 0.5).
Bug: `random.shuffle(x)` shuffles the questions alone, so every training label belongs to another question.
Fix (--fixed): the commit's fix, one permutation of indexes applied to both x and y.
Ported: Keras 2 -> PyTorch (Keras initialisers: embeddings uniform +-0.05, glorot kernel, orthogonal
recurrent kernel, forget-gate bias 1; Keras' categorical_crossentropy written out, probabilities clipped
to [1e-7, 1 - 1e-7]); synthetic questions with the real file's size and class counts (2,596 professor
questions, 9 answers, 42% class 0, 3 to 9 words); 16 epochs as in the fix commit (336 steps).
Printed metric (plain python): buggy test accuracy 0.399 and final train loss 1.642 (the entropy of
the label frequencies, 1.74: only the class prior is learnt); fixed 1.000 and 0.005.
"""
# expect: cause=input_data
import argparse
import random

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=16)
parser.add_argument("--fixed", action="store_true", help="shuffle x and y with the same permutation")
args = parser.parse_args()

torch.manual_seed(0)
random.seed(0)

num_of_gas, max_question_length, top_words, embedding_vector_length = 9, 25, 5000, 64
percent_test, batch_size = 0.5, 64

# Questions like the real file's: per answer class a few template words ("where", "office", "email",
# "website", "teach", ...), one or two entity words (professor names, rooms) shared by all classes, and
# filler words; word ids are hashes in 0..4999.
counts = [1103, 362, 96, 42, 327, 235, 122, 138, 171]       # the real class counts
g = torch.Generator().manual_seed(1)
template = torch.randint(1, top_words, (num_of_gas, 6), generator=g)
entities = torch.randint(1, top_words, (40,), generator=g)
fillers = torch.randint(1, top_words, (30,), generator=g)
x, y = [], []
for c, n in enumerate(counts):
    for _ in range(n):
        words = template[c][torch.randperm(6, generator=g)[:torch.randint(2, 5, (1,), generator=g)]]
        extra = [entities[torch.randint(0, 40, (1,), generator=g)]]
        if torch.rand(1, generator=g) < 0.6:
            extra.append(fillers[torch.randint(0, 30, (1,), generator=g)])
        q = torch.cat([words, torch.cat(extra)])
        x.append(q[torch.randperm(len(q), generator=g)].tolist())
        temp = [0] * num_of_gas
        temp[c] = 1
        y.append(temp)
order = list(range(len(x)))           # the csv's rows are in time order, classes interleaved
random.shuffle(order)
x, y = [x[i] for i in order], [y[i] for i in order]

if args.fixed:
    indexes = list(range(len(x)))
    random.shuffle(indexes)
    x = [x[i] for i in indexes]
    y = [y[i] for i in indexes]
else:
    random.shuffle(x)                 # the bug: the questions move, their labels stay


def pad_sequences(seqs, maxlen):      # Keras' default: pre-padding with 0, pre-truncation
    out = torch.zeros(len(seqs), maxlen, dtype=torch.long)
    for i, s in enumerate(seqs):
        s = s[-maxlen:]
        out[i, maxlen - len(s):] = torch.tensor(s)
    return out


x = pad_sequences(x, max_question_length)
y = torch.tensor(y, dtype=torch.float32)
split_point = int(len(x) * percent_test)
x_test, x_train = x[:split_point], x[split_point:]
y_test, y_train = y[:split_point], y[split_point:]


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(top_words, embedding_vector_length)
        self.lstm = nn.LSTM(embedding_vector_length, 50, batch_first=True)
        self.dense = nn.Linear(50, num_of_gas)
        nn.init.uniform_(self.embedding.weight, -0.05, 0.05)
        for name, p in self.lstm.named_parameters():
            if "weight_ih" in name:
                for k in range(4):
                    nn.init.xavier_uniform_(p.data[k * 50:(k + 1) * 50])
            elif "weight_hh" in name:
                for k in range(4):
                    nn.init.orthogonal_(p.data[k * 50:(k + 1) * 50])
            elif "bias_ih" in name:
                p.data.zero_()
                p.data[50:100] = 1.0          # unit_forget_bias
            else:
                p.data.zero_()
        nn.init.xavier_uniform_(self.dense.weight)
        nn.init.zeros_(self.dense.bias)

    def forward(self, q):
        out, _ = self.lstm(self.embedding(q))
        return torch.softmax(self.dense(out[:, -1]), dim=1)     # Dense(9, activation='softmax')


model = Model()
optimizer = torch.optim.RMSprop(model.parameters(), lr=0.001, alpha=0.9, eps=1e-7)


def categorical_crossentropy(p, t):   # Keras: -sum(t * log(clip(p, eps, 1 - eps)))
    return -(t * p.clamp(1e-7, 1 - 1e-7).log()).sum(1).mean()


for epoch in range(args.epochs):
    perm = torch.randperm(len(x_train))           # Keras fit shuffles each epoch
    for i in range(0, len(x_train), batch_size):
        idx = perm[i:i + batch_size]
        loss = categorical_crossentropy(model(x_train[idx]), y_train[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

with torch.no_grad():
    train_loss = categorical_crossentropy(model(x_train), y_train).item()
    acc = (model(x_test).argmax(1) == y_test.argmax(1)).float().mean().item()
print(f"data_x_only_shuffled_gac: {'x and y shuffled together' if args.fixed else 'x shuffled alone'}, "
      f"{args.epochs} epochs, train loss {train_loss:.3f}, test accuracy {acc:.3f}")

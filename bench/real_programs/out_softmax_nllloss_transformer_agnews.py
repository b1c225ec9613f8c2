"""A Transformer text classifier whose output layer is nn.Softmax and whose loss is nn.NLLLoss: loss = -p.

Source: https://github.com/AnubhavGupta3377/Text-Classification-Models-Pytorch/issues/9  (GitHub issue
"NLLLoss": "I think the input of nn.NLLloss() is after logsoftmax ... however, here only softmax is
provided in model.py therefore, the loss is always negative. I only check the Transformer model.")
Program: Model_Transformer/ of the repository at b572d96: Embeddings (x sqrt(d_model)) + sinusoidal
PositionalEncoding, Encoder of N = 1 pre-norm EncoderLayer (MultiHeadedAttention h = 8, position-wise
feed-forward, custom LayerNorm, dropout 0.1), the encoding of the last position -> nn.Linear(d_model, 4)
-> nn.Softmax(); train.py: optim.Adam(lr=0.0003), nn.NLLLoss(), y = batch.label - 1, batch 128, the
run_epoch loop (zero_grad, forward, loss, backward, step; lr halved at 1/3 and 2/3 of max_epochs).
Bug: NLLLoss expects log-probabilities; on probabilities it computes -p[y], bounded in [-1, 0], whose
gradient p_y * (p - onehot) vanishes both when the net is right and when it is confidently wrong.
Fix (--fixed): nn.LogSoftmax(dim=1) as the output non-linearity (what NLLLoss expects).
Ported: synthetic AG-News-like sentences (4 classes; 10-40 tokens, 30% drawn from 10 keywords of the
class, the rest from 3,000 shared words; padded to max_sen_len 40 with the pad token) in place of AG News;
d_model 128, d_ff 256 (the config: 256, 512); 3 epochs of 60 batches of 64 (the config: 35 epochs, batch
128); max_epochs = 3 for the lr halving.
Printed metric (plain python): test accuracy and mean training loss of the last epoch:
buggy accuracy 0.718 (loss -0.525, it learns, slowly); fixed accuracy 0.969 (loss 0.739, with dropout).
"""
# expect: cause=architecture

import argparse
import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--max-epochs", type=int, default=3)
parser.add_argument("--fixed", action="store_true", help="LogSoftmax output for NLLLoss")
args = parser.parse_args()

torch.manual_seed(0)


class Config:
    N = 1
    d_model = 128       # 256 in the repository
    d_ff = 256          # 512 in the repository
    h = 8
    dropout = 0.1
    output_size = 4
    lr = 0.0003
    max_epochs = args.max_epochs
    batch_size = 64     # 128 in the repository
    max_sen_len = 40    # 60 in the repository


def clones(module, N):
    return nn.ModuleList([copy.deepcopy(module) for _ in range(N)])


class Embeddings(nn.Module):
    def __init__(self, d_model, vocab):
        super().__init__()
        self.lut = nn.Embedding(vocab, d_model)
        self.d_model = d_model

    def forward(self, x):
        return self.lut(x) * math.sqrt(self.d_model)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer('pe', pe.unsqueeze(0))

    def forward(self, x):
        return self.dropout(x + self.pe[:, :x.size(1)])


def attention(query, key, value, mask=None, dropout=None):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = F.softmax(scores, dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn


class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model, dropout=0.1):
        super().__init__()
        assert d_model % h == 0
        self.d_k = d_model // h
        self.h = h
        self.linears = clones(nn.Linear(d_model, d_model), 4)
        self.attn = None
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        nbatches = query.size(0)
        query, key, value = [l(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
                             for l, x in zip(self.linears, (query, key, value))]
        x, self.attn = attention(query, key, value, mask=mask, dropout=self.dropout)
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.linears[-1](x)


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(F.relu(self.w_1(x))))


class LayerNorm(nn.Module):
    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


class SublayerOutput(nn.Module):
    def __init__(self, size, dropout):
        super().__init__()
        self.norm = LayerNorm(size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(self.norm(x)))


class EncoderLayer(nn.Module):
    def __init__(self, size, self_attn, feed_forward, dropout):
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.sublayer_output = clones(SublayerOutput(size, dropout), 2)
        self.size = size

    def forward(self, x, mask=None):
        x = self.sublayer_output[0](x, lambda x: self.self_attn(x, x, x, mask))
        return self.sublayer_output[1](x, self.feed_forward)


class Encoder(nn.Module):
    def __init__(self, layer, N):
        super().__init__()
        self.layers = clones(layer, N)
        self.norm = LayerNorm(layer.size)

    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class Transformer(nn.Module):
    def __init__(self, config, src_vocab):
        super().__init__()
        self.config = config
        h, N, dropout = self.config.h, self.config.N, self.config.dropout
        d_model, d_ff = self.config.d_model, self.config.d_ff
        attn = MultiHeadedAttention(h, d_model)
        ff = PositionwiseFeedForward(d_model, d_ff, dropout)
        position = PositionalEncoding(d_model, dropout)
        self.encoder = Encoder(EncoderLayer(config.d_model, copy.deepcopy(attn), copy.deepcopy(ff), dropout),
                               N)
        self.src_embed = nn.Sequential(Embeddings(config.d_model, src_vocab), copy.deepcopy(position))
        self.fc = nn.Linear(self.config.d_model, self.config.output_size)
        # Softmax non-linearity
        self.softmax = nn.LogSoftmax(dim=1) if args.fixed else nn.Softmax(dim=1)

    def forward(self, x):
        embedded_sents = self.src_embed(x.permute(1, 0))   # torchtext batches are (sen_len, batch_size)
        encoded_sents = self.encoder(embedded_sents)
        final_feature_map = encoded_sents[:, -1, :]
        final_out = self.fc(final_feature_map)
        return self.softmax(final_out)

    def add_optimizer(self, optimizer):
        self.optimizer = optimizer

    def add_loss_op(self, loss_op):
        self.loss_op = loss_op

    def reduce_lr(self):
        for g in self.optimizer.param_groups:
            g['lr'] = g['lr'] / 2

    def run_epoch(self, train_iterator, epoch):
        losses = []
        if (epoch == int(self.config.max_epochs / 3)) or (epoch == int(2 * self.config.max_epochs / 3)):
            self.reduce_lr()
        for i, (text, label) in enumerate(train_iterator):
            self.optimizer.zero_grad()
            x = text
            y = (label - 1).type(torch.LongTensor)
            y_pred = self.__call__(x)
            loss = self.loss_op(y_pred, y)
            loss.backward()
            losses.append(loss.item())
            self.optimizer.step()
        return sum(losses) / len(losses)


VOCAB, PAD = 3200, 1


def make(n, seed):
    g = torch.Generator().manual_seed(seed)
    keywords = torch.arange(3000, 3040).view(4, 10)           # 10 keywords per class
    labels = torch.randint(1, 5, (n,), generator=g)            # AG News labels are 1..4
    text = torch.full((n, Config.max_sen_len), PAD)
    for i in range(n):
        L = int(torch.randint(10, Config.max_sen_len + 1, (1,), generator=g))
        words = torch.randint(2, 3000, (L,), generator=g)
        kw = torch.rand(L, generator=g) < 0.3
        words[kw] = keywords[labels[i] - 1][torch.randint(0, 10, (int(kw.sum()),), generator=g)]
        text[i, :L] = words
    return text, labels


def batches(text, labels, bs, shuffle):
    idx = torch.randperm(len(text)) if shuffle else torch.arange(len(text))
    for i in range(0, len(text), bs):
        j = idx[i:i + bs]
        yield text[j].t(), labels[j]


config = Config()
Xtr, ytr = make(60 * config.batch_size, 1)
Xte, yte = make(1000, 2)
model = Transformer(config, VOCAB)
model.train()
optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
NLLLoss = nn.NLLLoss()
model.add_optimizer(optimizer)
model.add_loss_op(NLLLoss)

for i in range(config.max_epochs):
    train_loss = model.run_epoch(batches(Xtr, ytr, config.batch_size, True), i)

model.eval()
with torch.no_grad():
    acc = (model(Xte.t()).argmax(1) == (yte - 1)).float().mean().item()
print(f"softmax_nllloss_transformer: last-epoch train loss {train_loss:.4f}, test accuracy {acc:.3f}")

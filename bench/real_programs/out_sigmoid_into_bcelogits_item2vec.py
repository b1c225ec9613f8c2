"""daisyRec's Item2Vec: a sigmoid on the scores, then BCEWithLogitsLoss, which applies the sigmoid again.

Source: https://github.com/AmazingDD/daisyRec/pull/15  (pull request "Do not need sigmoid because
there is sigmoid in BCEWithLogitsLoss", merged as a2cb8ef: "Otherwise loss does not converge.")
Program: daisy/model/Item2VecRecommender.py at 5cce37e^ with daisy/assets/item2vec.yaml and
basic.yaml: skip-gram with negative sampling over each user's item sequence (context window 2, as many
negatives as contexts, drawn from the items the user never touched), one shared nn.Embedding(items,
100) initialised N(0, 0.01), score = sigmoid(<e_target, e_context>), criterion
BCEWithLogitsLoss(reduction='sum') (loss_type 'CL'), Adam lr 0.001, batch 256, 20 epochs; a user is the
sum of its items' embeddings and is scored against every item.
Bug: `output = self.out_act(output)` (nn.Sigmoid) before a loss that takes logits: the loss sees
sigmoid(sigmoid(s)), bounded to [0.5, 0.73], so it cannot go below 0.31 for a positive pair nor below
0.69 for a negative one, and its gradient shrinks with sigmoid'(s) as the scores grow.
Fix (--fixed): the PR's, the sigmoid removed (raw scores into BCEWithLogitsLoss).
Ported: synthetic ml-100k-like interactions (300 users, 400 items in 10 genres, 40 interactions a
user from two genres, popularity-skewed; the last 5 held out), 10 epochs of the 20.
Printed metric (plain python): mean training loss per pair in the last epoch and recall@10 of the
held-out items: buggy 0.661 and 0.260; fixed 0.525 and 0.324.
"""
# expect: cause=architecture
import argparse

import torch
import torch.nn as nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--fixed", action="store_true", help="no sigmoid before BCEWithLogitsLoss")
args = parser.parse_args()

torch.manual_seed(0)

user_num, item_num, genres = 300, 400, 10
g = torch.Generator().manual_seed(1)
genre = torch.randint(0, genres, (item_num,), generator=g)
popularity = torch.rand(item_num, generator=g) ** 3 + 0.05
train_seqs, test_items = [], []
for u in range(user_num):
    likes = torch.randperm(genres, generator=g)[:2]
    w = popularity * ((genre == likes[0]) | (genre == likes[1])).float() + 0.05 * popularity
    items = torch.multinomial(w, 40, replacement=False, generator=g).tolist()
    train_seqs.append(items[:35])
    test_items.append(items[35:])


def sampling(context_window=2):               # daisy/utils/sampler.py SkipGramNegativeSampler
    samples = []
    for u, seq in enumerate(train_seqs):
        cands = torch.tensor(sorted(set(range(item_num)) - set(seq)))
        for i in range(len(seq)):
            context_list = []
            j = i - context_window
            while j <= i + context_window and j < len(seq):
                if j >= 0 and j != i:
                    context_list.append(seq[j])
                    samples.append([seq[i], seq[j], 1])
                j += 1
            for neg_item in cands[torch.randint(0, len(cands), (len(context_list),), generator=g)].tolist():
                samples.append([seq[i], neg_item, 0])
    return torch.tensor(samples)


class Item2Vec(nn.Module):
    def __init__(self, factors=100):
        super().__init__()
        self.user_embedding = nn.Embedding(user_num, factors)
        self.shared_embedding = nn.Embedding(item_num, factors)
        self.out_act = nn.Sigmoid()
        nn.init.normal_(self.user_embedding.weight, 0.0, 0.01)      # init_method 'normal'
        nn.init.normal_(self.shared_embedding.weight, 0.0, 0.01)

    def forward(self, target_i, context_j):
        target_emb = self.shared_embedding(target_i)
        context_emb = self.shared_embedding(context_j)
        output = torch.sum(target_emb * context_emb, dim=1)
        if not args.fixed:
            output = self.out_act(output)
        return output.view(-1)


model = Item2Vec()
optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
criterion = nn.BCEWithLogitsLoss(reduction='sum')
samples = sampling()
for epoch in range(args.epochs):
    perm = torch.randperm(len(samples))
    current_loss = 0.0
    for k in range(0, len(samples), 256):
        batch = samples[perm[k:k + 256]]
        model.zero_grad()
        prediction = model(batch[:, 0], batch[:, 1])
        loss = criterion(prediction, batch[:, 2].float())
        loss.backward()
        optimizer.step()
        current_loss += loss.item()

with torch.no_grad():                         # fit(): users as the sum of their items; full_rank
    for u, seq in enumerate(train_seqs):
        model.user_embedding.weight.data[u] = model.shared_embedding(torch.tensor(seq)).sum(dim=0)
    scores = model.user_embedding.weight @ model.shared_embedding.weight.T
    for u, seq in enumerate(train_seqs):
        scores[u, seq] = -float("inf")
    top = scores.topk(10, dim=1).indices
    recall = sum(len(set(top[u].tolist()) & set(test_items[u])) for u in range(user_num)) / (5 * user_num)
print(f"out_sigmoid_into_bcelogits_item2vec: {'raw scores' if args.fixed else 'sigmoid scores'} into "
      f"BCEWithLogitsLoss, {args.epochs} epochs, loss per pair {current_loss / len(samples):.3f}, "
      f"recall@10 {recall:.3f}")

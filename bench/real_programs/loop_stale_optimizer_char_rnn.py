"""The char-RNN name classifier trained through an optimizer built over an earlier instance of the RNN.

Source: https://github.com/spro/practical-pytorch/issues/9  (GitHub issue "char-rnn-classification
parameters update method confusion": replacing the manual update by optimizer.step() gives a loss that
"is big, and flows up and down, do not diminish"; the author's answer: "I have the model instantiated
twice - once directly after the RNN class, and once before the main `for epoch in ...` loop ... Try
moving the optimizer to below the second one, so the params aren't reset"; fixed in commit 67ac021)
Program: char-rnn-classification.ipynb at 67ac021: RNN with i2h = Linear(57 + 128, 128) and
i2o = Linear(57 + 128, 18) on [one-hot letter, hidden], LogSoftmax, NLLLoss, one name per step,
`rnn.zero_grad()`, a loop over the letters, `loss.backward()`, `optimizer.step()` with
SGD(lr=0.005).
Bug: `optimizer = torch.optim.SGD(rnn.parameters(), ...)` is built after the first `rnn = RNN(...)`, and
the training cell builds `rnn = RNN(...)` again: the optimizer holds the first RNN's parameters (which
never get a gradient, so SGD skips them) and the RNN being trained is in no optimizer. Its gradients
are computed (and zeroed by rnn.zero_grad()) every step, its weights never change.
Fix (--fixed): the author's: the optimizer is built over the RNN that is trained.
Ported: synthetic names for 18 languages (each language its own letters and endings, 3 to 9 letters);
4,000 names (the notebook trains on 100,000); LogSoftmax(dim=1), the implicit dim of the time.
Printed metric (plain python): accuracy over 2,000 random names and mean loss of the last 1,000 steps:
buggy 0.075 and 2.882 (chance: 1/18, ln 18 = 2.89); fixed 0.700 and 2.452.
"""
# expect: cause=training_loop
import argparse
import random
import string

import torch
import torch.nn as nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--n-epochs", type=int, default=4000)
parser.add_argument("--fixed", action="store_true", help="build the optimizer over the RNN that is trained")
args = parser.parse_args()

torch.manual_seed(0)
random.seed(0)

all_letters = string.ascii_letters + " .,;'"
n_letters = len(all_letters)

# 18 "languages": each draws its names from its own 8 lower-case letters and ends them with one of its
# own three endings (as "-ski", "-ov", "-ez" tell Polish, Russian, Spanish apart).
all_categories = [f"lang{k}" for k in range(18)]
rng = random.Random(1)
letters = {c: rng.sample(string.ascii_lowercase, 8) for c in all_categories}
endings = {c: ["".join(rng.sample(string.ascii_lowercase, rng.randint(1, 3))) for _ in range(3)]
           for c in all_categories}


def make_name(category):
    stem = "".join(random.choice(letters[category]) for _ in range(random.randint(2, 6)))
    return stem.capitalize() + random.choice(endings[category])


category_lines = {c: [make_name(c) for _ in range(300)] for c in all_categories}
n_categories = len(all_categories)


def line_to_tensor(line):
    tensor = torch.zeros(len(line), 1, n_letters)
    for li, letter in enumerate(line):
        tensor[li][0][all_letters.find(letter)] = 1
    return tensor


class RNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super(RNN, self).__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = output_size
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.i2o = nn.Linear(input_size + hidden_size, output_size)
        self.softmax = nn.LogSoftmax(dim=1)

    def forward(self, input, hidden):
        combined = torch.cat((input, hidden), 1)
        hidden = self.i2h(combined)
        output = self.i2o(combined)
        output = self.softmax(output)
        return output, hidden

    def init_hidden(self):
        return torch.zeros(1, self.hidden_size)


n_hidden = 128
rnn = RNN(n_letters, n_hidden, n_categories)          # the notebook's first instance


def category_from_output(output):
    top_n, top_i = output.data.topk(1)
    return top_i[0][0].item()


def random_training_pair():
    category = random.choice(all_categories)
    line = random.choice(category_lines[category])
    category_tensor = torch.LongTensor([all_categories.index(category)])
    return category, line, category_tensor, line_to_tensor(line)


criterion = nn.NLLLoss()
learning_rate = 0.005
if not args.fixed:
    optimizer = torch.optim.SGD(rnn.parameters(), lr=learning_rate)   # built here, over the first rnn


def train(category_tensor, line_tensor):
    rnn.zero_grad()
    hidden = rnn.init_hidden()
    for i in range(line_tensor.size()[0]):
        output, hidden = rnn(line_tensor[i], hidden)
    loss = criterion(output, category_tensor)
    loss.backward()
    optimizer.step()
    return output, loss.item()


if not args.fixed:
    rnn = RNN(n_letters, n_hidden, n_categories)      # the training cell's second instance
else:
    optimizer = torch.optim.SGD(rnn.parameters(), lr=learning_rate)

losses = []
for epoch in range(1, args.n_epochs + 1):
    category, line, category_tensor, line_tensor = random_training_pair()
    output, loss = train(category_tensor, line_tensor)
    losses.append(loss)

correct = 0
with torch.no_grad():
    for _ in range(2000):
        category, line, category_tensor, line_tensor = random_training_pair()
        hidden = rnn.init_hidden()
        for i in range(line_tensor.size()[0]):
            output, hidden = rnn(line_tensor[i], hidden)
        correct += category_from_output(output) == category_tensor.item()
print(f"loop_stale_optimizer_char_rnn: {'one rnn' if args.fixed else 'optimizer over the first rnn'}, "
      f"{args.n_epochs} names, mean loss of the last 1000 {sum(losses[-1000:]) / 1000:.3f}, "
      f"accuracy {correct / 2000:.3f}")

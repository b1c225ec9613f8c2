"""A 2-2-1 sigmoid network learning XOR: the loss sits at ln 2 for ~250 steps, then it learns.

Source: https://github.com/deeplearningzerotoall/PyTorch/blob/master/lab-08_2_xor_nn.ipynb  (course
repository "Deep Learning Zero To All", PyTorch lab 8-2, XOR with a multi-layer perceptron)
Bug: none. With lr=1 full-batch SGD and BCELoss, the two sigmoid hidden units start nearly symmetric
and the output sits at 0.5 (loss 0.6931 = ln 2) for a long plateau; the symmetry breaks slowly and
then the loss falls fast. The lab runs 10001 steps with seed 777, where the plateau lasts longer than
this benchmark's step budget; seed 20 (the only change) gives a plateau of about 250 steps, then
learning, within 600 steps.
Fix (--fixed): nothing to fix (accepted and ignored).
Printed metric (plain python): loss 0.7384 at step 0, 0.6919 at step 100, 0.6875 at step 200, 0.6153
at step 300, 0.048 at step 600; accuracy 1.00.
"""
# expect: healthy
import argparse

import torch

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=600)
parser.add_argument("--fixed", action="store_true", help="accepted and ignored: the program is correct")
args = parser.parse_args()

# The lab uses seed 777; its plateau lasts beyond 1000 steps, so a seed with a shorter one is used.
torch.manual_seed(20)

X = torch.FloatTensor([[0, 0], [0, 1], [1, 0], [1, 1]])
Y = torch.FloatTensor([[0], [1], [1], [0]])

# nn layers
linear1 = torch.nn.Linear(2, 2, bias=True)
linear2 = torch.nn.Linear(2, 1, bias=True)
sigmoid = torch.nn.Sigmoid()
model = torch.nn.Sequential(linear1, sigmoid, linear2, sigmoid)

criterion = torch.nn.BCELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=1)  # the lab raised it from 0.1 to 1

history = []
for _ in range(args.steps):
    optimizer.zero_grad()
    hypothesis = model(X)
    cost = criterion(hypothesis, Y)
    cost.backward()
    optimizer.step()
    history.append(cost.item())

with torch.no_grad():
    hypothesis = model(X)
    predicted = (hypothesis > 0.5).float()
    accuracy = (predicted == Y).float().mean().item()
marks = ", ".join(f"step {i}: {history[i]:.4f}" for i in (0, 100, 200, 300) if i < len(history))
print(f"xor_plateau: {args.steps} steps, loss {marks}, final {history[-1]:.4f}, accuracy {accuracy:.2f}")

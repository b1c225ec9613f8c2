"""A 3-layer sigmoid network is trained on targets in the thousands: its sigmoid output cannot exceed 1.

Source: http://stackoverflow.com/questions/9048031/neural-network-output-scaling-the-output-range
(Stack Overflow question and accepted answer)
Bug: the output layer uses a sigmoid, which only outputs (0, 1), while the targets are 0, 1000, 1 and 0
(inputs 0 0 / 0 1 / 1000 1 / 1 1); the squared error cannot fall below ~250,000 per pattern set.
Fix (--fixed): the accepted answer: for regression take the raw linear combination at the output (no
sigmoid); "the network will automatically learn the weights to give whatever output values you have".
(The answer's side remark, scaling the inputs, is not applied: only the output changes.)
Printed metric (plain python): buggy MSE 2.495e+05 (every prediction 1.0); fixed MSE 135.7
(predictions 10.9, 984.9, -7.9, 10.9).
"""
# expect: cause=architecture

import argparse

import torch

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--fixed", action="store_true", help="linear output")
args = parser.parse_args()

torch.manual_seed(0)

# The question's training patterns: input ----> output.
X = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1000.0, 1.0], [1.0, 1.0]])
y = torch.tensor([[0.0], [1000.0], [1.0], [0.0]])

# A 3-layered network (2 inputs, a sigmoid hidden layer, 1 output) with hand-written weights.
hidden = 8
w1 = (torch.rand(2, hidden) - 0.5).requires_grad_()
b1 = torch.zeros(hidden, requires_grad=True)
w2 = (torch.rand(hidden, 1) - 0.5).requires_grad_()
b2 = torch.zeros(1, requires_grad=True)
params = [w1, b1, w2, b2]
optimizer = torch.optim.SGD(params, lr=0.01)                # plain backpropagation

for _ in range(args.steps):
    h = torch.sigmoid(X @ w1 + b1)
    out = h @ w2 + b2
    if not args.fixed:
        out = torch.sigmoid(out)                      # output squashed to (0, 1)
    loss = ((out - y) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

print(f"sigmoid_output_thousands: final MSE {loss.item():.4g}, predictions "
      f"{[round(v, 2) for v in out.detach().flatten().tolist()]}")

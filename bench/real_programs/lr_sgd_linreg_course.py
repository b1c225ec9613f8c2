"""A one-feature linear regression from a PyTorch course diverges at its SGD learning rate of 0.01.

Source: https://github.com/rslim087a/PyTorch-for-Deep-Learning-and-Computer-Vision-Course-All-Codes-/issues/1
(GitHub issue "Limear Regression diverges": "I am using exactly the code as per Linear_Regression.ipynb but it
diverges!"; answer: "I have solved this problem by dramatically decreasing the learning rate"; the notebook,
as later corrected in the fork's copy, uses lr = 0.001)
Program: Linear_Regression.ipynb: X = torch.randn(100, 1)*10, y = X + 3*torch.randn(100, 1), class LR with one
nn.Linear(1, 1), torch.manual_seed(1) before the model, nn.MSELoss(), torch.optim.SGD(lr=0.01), 100 epochs of
full-batch `y_pred = model.forward(X); loss = criterion(y_pred, y); optimizer.zero_grad(); loss.backward();
optimizer.step()`.
Bug: with inputs of standard deviation 10 the MSE's curvature in w is 2*mean(x^2) ~ 200, so lr = 0.01 puts
SGD at or past the stability limit lr < 2/200: with a sample whose mean(x^2) is above 100 the weight
oscillates with growing amplitude and the loss explodes.
Fix (--fixed): lr = 0.001 (the corrected notebook's value).
Ported: verbatim (the data are the notebook's own synthetic data); a data seed is fixed (the notebook draws X
unseeded), seed 0, the first seed whose mean(x^2) exceeds 100, as about half of all draws do.
Printed metric (plain python): buggy loss 29.9 -> 4.6e9, w = -7299; fixed loss 29.9 -> 8.09, w = 0.967.
"""
# expect: cause=learning_rate
import argparse

import torch
import torch.nn as nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--fixed", action="store_true", help="lr = 0.001")
args = parser.parse_args()

torch.manual_seed(0)
X = torch.randn(100, 1)*10
y = X + 3*torch.randn(100, 1)


class LR(nn.Module):
    def __init__(self, input_size, output_size):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)

    def forward(self, x):
        pred = self.linear(x)
        return pred


torch.manual_seed(1)
model = LR(1, 1)
[w, b] = model.parameters()

criterion = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.001 if args.fixed else 0.01)

epochs = 100
losses = []
for i in range(epochs):
    y_pred = model.forward(X)
    loss = criterion(y_pred, y)
    losses.append(loss.item())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

print(f"lr_sgd_linreg_course: lr={optimizer.param_groups[0]['lr']}, mean(x^2)={float((X**2).mean()):.1f}, "
      f"loss first {losses[0]:.3g}, min {min(losses):.3g}, last {losses[-1]:.3g}, "
      f"w={w.item():.4g}, b={b.item():.4g}")

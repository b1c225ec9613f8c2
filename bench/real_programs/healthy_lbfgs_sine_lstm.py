"""Two stacked LSTMCells learn sine waves with LBFGS: one optimizer.step runs ~20 forward/backward passes.

Source: https://github.com/pytorch/examples/blob/main/time_sequence_prediction/train.py  (official
pytorch/examples, time sequence prediction; data from generate_sine_wave.py)
Bug: none. optim.LBFGS(lr=0.8) is stepped with a closure that zeroes the grads, runs the whole
sequence and calls backward; each optimizer.step() evaluates the closure up to 20 times (max_iter),
so there are many more backward passes than optimizer steps, the loss is printed inside the closure,
and the model runs in float64 (seq.double()), all as in the source.
Deviation for speed: sequences of 50 samples instead of 1000 (same period T=20, same 100 waves,
same 3 held out), 50 future steps predicted instead of 1000; 2 LBFGS steps instead of 15.
Fix (--fixed): nothing to fix (accepted and ignored).
Printed metric (plain python): train MSE 0.514 at the first closure call -> 1.3e-03 after 2 LBFGS
steps (40 closure calls); test MSE 1.5e-03.
"""
# expect: healthy
import argparse

import torch
import torch.nn as nn
import torch.optim as optim

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=2, help="LBFGS steps (each up to 20 closure calls)")
parser.add_argument("--fixed", action="store_true", help="accepted and ignored: the program is correct")
args = parser.parse_args()

torch.manual_seed(0)

# generate_sine_wave.py: N waves of length L, each shifted by a random integer in [-4T, 4T).
T, L, N = 20, 50, 100
shift = torch.randint(-4 * T, 4 * T, (N, 1))
x = torch.arange(L).unsqueeze(0) + shift
data = torch.sin(x / 1.0 / T).double()


class Sequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, 51)
        self.lstm2 = nn.LSTMCell(51, 51)
        self.linear = nn.Linear(51, 1)

    def forward(self, input, future=0):
        outputs = []
        h_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for _ in range(future):  # if we should predict the future
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        return torch.cat(outputs, dim=1)


input = data[3:, :-1]
target = data[3:, 1:]
test_input = data[:3, :-1]
test_target = data[:3, 1:]

seq = Sequence()
seq.double()
criterion = nn.MSELoss()
# use LBFGS as optimizer since we can load the whole data to train
optimizer = optim.LBFGS(seq.parameters(), lr=0.8)
closure_losses = []
for _ in range(args.steps):
    def closure():
        optimizer.zero_grad()
        out = seq(input)
        loss = criterion(out, target)
        closure_losses.append(loss.item())
        loss.backward()
        return loss
    optimizer.step(closure)
    # begin to predict, no need to track gradient here
    with torch.no_grad():
        future = 50
        pred = seq(test_input, future=future)
        test_loss = criterion(pred[:, :-future], test_target)

print(f"lbfgs_sine_lstm: {args.steps} LBFGS steps, {len(closure_losses)} closure calls, train MSE "
      f"{closure_losses[0]:.4g} -> {closure_losses[-1]:.4g}, test MSE {test_loss.item():.4g}")

"""One corrupted sample in a dataset, read through a shuffling DataLoader with workers.

Fault shown: a classifier reads rows of positive measurements (counts, prices) that its
`head` takes the log of. Sample --bad-index (default 1234) of the dataset is corrupted: with
`--corrupt nan` one of its values is a missing value stored as NaN; with `--corrupt negative`
one is negative (a sign error upstream), and `log` turns it into NaN inside the model. The
DataLoader shuffles, so the step where the sample comes is not known in advance; once it
comes, the NaN reaches the loss, the gradients, and (without a stop) every weight.

Expected under `neuraldbg run --stop-on nonfinite`: exit 3 at the step whose batch holds the
sample, before its update; the capture names dataset index --bad-index, and the pinpoint
says where the NaN is born: already in the input (`nan`), or in `log` inside `head`
(`negative`). The script's `finally` reports whether its weights are still finite.

    python sample_scripts/nan_sample.py [--corrupt nan|negative] [--workers 2] [--epochs 2]
    neuraldbg run --stop-on nonfinite sample_scripts/nan_sample.py --workers 2
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Measurements(Dataset):
    def __init__(self, n: int, bad_index: int, corrupt: str):
        g = torch.Generator().manual_seed(0)
        self.x = torch.rand(n, 16, generator=g) * 10 + 0.5
        self.y = (self.x.log() @ torch.randn(16, 4, generator=g)).argmax(dim=1)
        if corrupt != "none":
            self.x[bad_index, 5] = float("nan") if corrupt == "nan" else -3.0

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 32)

    def forward(self, x):
        return self.fc(torch.log(x))        # measurements span decades: log-scaled


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corrupt", choices=("nan", "negative", "none"), default="nan")
    parser.add_argument("--bad-index", type=int, default=1234)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    torch.manual_seed(0)
    data = Measurements(2048, args.bad_index, args.corrupt)
    loader = DataLoader(data, batch_size=64, shuffle=True, num_workers=args.workers,
                        generator=torch.Generator().manual_seed(1))
    model = nn.Sequential()
    model.add_module("head", Head())
    model.add_module("act", nn.ReLU())
    model.add_module("out", nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = 0
    try:
        for _ in range(args.epochs):
            for x, y in loader:
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
    finally:
        finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
        print(f"nan_sample: {step} steps taken, weights finite: {finite}")


if __name__ == "__main__":
    main()

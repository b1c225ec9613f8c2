"""DataLoader with spawn workers over a Dataset class defined here and a collate_fn that
returns an object of a class defined here (pickled back from the workers)."""
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class DS(Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(4, generator=g), float(i % 2)


class Batch:
    def __init__(self, x, y):
        self.x, self.y = x, y


def collate(items):
    return Batch(torch.stack([a for a, _ in items]), torch.tensor([b for _, b in items]))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(DS(), batch_size=8, num_workers=2, collate_fn=collate,
                        multiprocessing_context="spawn", persistent_workers=True)
    steps = 0
    for epoch in range(2):
        for batch in loader:
            assert type(batch).__name__ == "Batch", type(batch)
            loss = ((model(batch.x).squeeze(1) - batch.y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
            if steps == 3:
                break
        if steps == 3:
            break
    print("steps", steps, "batch", type(batch).__module__, type(batch).__qualname__)

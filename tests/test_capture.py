"""`run --capture DIR`: the evidence of the first counted failure, one file that
`torch.load` reads back: the step's inputs and targets, the batch's dataset indices, the
failing layer's tensors, the model and optimizer as they were before the failure wrote into
them; and the pinpoint: the operation, module and rows where a NaN is born."""
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from conftest import SAMPLES, run_end, run_neuraldbg
from neuraldbg_cli import NeuralDbg, TrainingStopped
from neuraldbg_cli.observe.samples import SampleIndices

BAD = 1234          # nan_sample.py's corrupted dataset index


def _capture(tmp_path, events) -> dict:
    [event] = [e for e in events if e["event"] == "capture"]
    return torch.load(Path(tmp_path) / event["path"], weights_only=False), event


@pytest.mark.e2e
@pytest.mark.parametrize("workers", [0, 2])
def test_a_nan_sample_is_captured_with_its_dataset_index(tmp_path, workers):
    proc, events = run_neuraldbg(tmp_path, SAMPLES / "nan_sample.py", "--workers", workers,
                                 options=["--stop-on", "nonfinite", "--capture", "cap"])
    assert proc.returncode == 3, proc.stderr
    data, event = _capture(tmp_path, events)
    assert event["path"].startswith("cap") and run_end(events)["stop"]["capture"] == event["path"]
    assert (data["state"], data["layer"], data["step"]) == ("nonfinite", "(input)",
                                                            run_end(events)["stop"]["at"])
    x = data["inputs"]["args"][0]
    assert x.device.type == "cpu" and x.shape == (64, 16)
    row = int(torch.isnan(x).any(dim=1).nonzero())
    assert data["sample_indices"][row] == BAD, "the shuffled batch's indices, in its order"
    assert data["blamed_indices"] == [BAD] and data["pinpoint"]["rows"] == [row]
    assert data["pinpoint"]["born"] == "input"
    assert data["targets"].shape == (64,)
    assert all(bool(torch.isfinite(v).all()) for v in data["model_state"].values())
    assert data["optimizer_state"]["param_groups"][0]["lr"] == 0.05
    assert "torch" in data["rng"]
    assert f"dataset index {BAD}" in proc.stderr


@pytest.mark.e2e
def test_the_pinpoint_names_the_op_the_module_and_the_row(tmp_path):
    proc, events = run_neuraldbg(tmp_path, SAMPLES / "nan_sample.py", "--corrupt", "negative",
                                 options=["--stop-on", "nonfinite"])
    assert proc.returncode == 3, proc.stderr
    data, event = _capture(tmp_path, events)
    pin = data["pinpoint"]
    assert (pin["born"], pin["op"], pin["module"], pin["kind"]) == ("op", "log", "head", "NaN")
    x = data["inputs"]["args"][0]
    row = int((x < 0).any(dim=1).nonzero())
    assert pin["rows"] == [row] and data["blamed_indices"] == [BAD]
    assert event["pinpoint"] == pin
    assert f"the NaN is born in `log` inside `head`, row {row}, dataset index {BAD}" \
        in proc.stderr


@pytest.mark.e2e
def test_a_dead_layer_is_captured_with_its_input_and_output(tmp_path):
    proc, events = run_neuraldbg(tmp_path, SAMPLES / "dying_relu.py",
                                 options=["--stop-on", "dead"])
    assert proc.returncode == 3, proc.stderr
    data, _ = _capture(tmp_path, events)
    assert (data["layer"], data["state"]) == ("1", "dead")
    inp, out = data["layer_tensors"]["input"], data["layer_tensors"]["output"]
    assert torch.equal(out, torch.relu(inp)), "the ReLU's own input and output"
    assert (out > 0).float().mean() < 0.01, "and it is dead"
    assert "pinpoint" in data and data["pinpoint"] is None


@pytest.mark.e2e
def test_capture_without_stop_keeps_the_weights_before_the_nan(tmp_path):
    proc, events = run_neuraldbg(tmp_path, SAMPLES / "nan_batch.py",
                                 options=["--capture", "cap", "--fail-on", "none"])
    assert proc.returncode == 0 and run_end(events)["status"] == "completed"
    data, _ = _capture(tmp_path, events)
    assert data["step"] == 30 and data["state"] == "nonfinite"
    assert all(bool(torch.isfinite(v).all()) for v in data["model_state"].values()), \
        "taken before the update of the NaN gradient"


class Indexed(Dataset):
    def __len__(self):
        return 200

    def __getitem__(self, i):
        return torch.tensor(float(i))


@pytest.mark.parametrize("workers,persistent", [(0, False), (2, False), (2, True)])
def test_sample_indices_follow_each_batch(workers, persistent):
    samples = SampleIndices()
    samples.install()
    try:
        loader = DataLoader(Indexed(), batch_size=16, shuffle=True, num_workers=workers,
                            persistent_workers=persistent)
        seen = 0
        for _ in range(2):
            for batch in loader:
                assert samples.last == [int(v) for v in batch], "the batch's own indices"
                seen += 1
        assert seen == 26
    finally:
        samples.remove()


def test_the_capture_changes_neither_the_model_nor_the_rng(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.ReLU(),
                          nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    with pytest.raises(TrainingStopped):
        with NeuralDbg(model, trace=str(tmp_path / "t.jsonl"), stop_on="nonfinite",
                       capture=str(tmp_path / "cap")):
            for step in range(5):
                x = torch.randn(16, 4)
                if step == 3:
                    x[2, 1] = float("nan")
                opt.zero_grad()
                model(x).sum().backward()
                state = {k: v.clone() for k, v in model.state_dict().items()}
                rng = torch.get_rng_state()
                opt.step()
    # (the NaN batch's own forward put NaN in BatchNorm's running mean: kept as it was)
    assert all(torch.allclose(state[k].double(), v.double(), rtol=0, atol=0, equal_nan=True)
               for k, v in model.state_dict().items()), "buffers restored after the re-run"
    assert torch.equal(rng, torch.get_rng_state())
    [path] = (tmp_path / "cap").iterdir()
    data = torch.load(path, weights_only=False)
    assert data["pinpoint"]["rows"] == [2]

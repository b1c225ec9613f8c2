"""The stop and the capture, presented: `explain` prints where training stopped, the
capture's path and the samples to blame; `--json` carries them; the HTML report links the
capture's file."""
import json

import pytest

from browser import need_chromium, render
from conftest import SAMPLES, run_neuraldbg
from neuraldbg_cli.cli import main

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """A run stopped on a NaN born in `log` inside `head`, from dataset index 1234."""
    tmp = tmp_path_factory.mktemp("stopped")
    proc, events = run_neuraldbg(tmp, SAMPLES / "nan_sample.py", "--corrupt", "negative",
                                 "--workers", "0", options=["--stop-on", "nonfinite"])
    assert proc.returncode == 3, proc.stderr
    [capture] = [e for e in events if e["event"] == "capture"]
    return tmp, capture


def test_explain_prints_the_stop_the_capture_and_the_samples(stopped, capsys, monkeypatch):
    tmp, capture = stopped
    monkeypatch.chdir(tmp)
    assert main(["explain", "trace.jsonl"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    row = capture["pinpoint"]["rows"][0]
    assert f"Stopped at step {capture['step']}, before its update" in out
    assert f"Evidence: {capture['path']}" in out
    assert f"the NaN is born in `log` inside `head`, row {row}, dataset index 1234" in out


def test_explain_json_names_the_capture(stopped, capsys, monkeypatch):
    tmp, capture = stopped
    monkeypatch.chdir(tmp)
    assert main(["explain", "--json", "trace.jsonl"]) == 0
    [trace] = json.loads(capsys.readouterr().out)["traces"]
    assert trace["status"] == "stopped" and trace["stop"]["capture"] == capture["path"]
    assert trace["capture"]["blamed_indices"] == [1234]
    assert trace["capture"]["pinpoint"]["op"] == "log"


def test_explain_blames_the_samples_the_pinpoint_found(stopped, capsys, monkeypatch):
    """The loss spiked before the NaN (a learning-rate story on its own): the pinpoint, one
    row of 64 carrying it, makes the data the cause."""
    tmp, capture = stopped
    monkeypatch.chdir(tmp)
    assert main(["explain", "--json", "trace.jsonl"]) == 0
    top = json.loads(capsys.readouterr().out)["hypotheses"][0]
    assert (top["symptom"], top["cause"]) == ("nonfinite", "input_data")
    assert top["confidence"] >= 0.9
    assert any("dataset index 1234" in e for e in top["evidence"])
    assert "1234" in top["fix"]


def test_the_report_links_the_capture(stopped):
    need_chromium()
    tmp, capture = stopped
    (tmp / "pages").mkdir(exist_ok=True)
    out = tmp / "pages" / "report.html"       # (elsewhere than the run: the link follows)
    assert main(["report", "-o", str(out), str(tmp / "trace.jsonl")]) == 0
    page = render(out)
    assert not page.errors, page.errors
    [link] = [a for a in page.find("a") if a.get("href", "").endswith(".pt")]
    assert link["href"] == f"./../{capture['path']}"
    assert (out.parent / link["href"]).resolve() == (tmp / capture["path"]).resolve()
    assert "dataset index 1234" in page.text and "Stopped at step" in page.text

"""What a newcomer's fresh environment sees: no numpy, an installed copy, the defaults file.

`pip install torch` brings no numpy, and `import torch` then warns on stderr. `neuraldbg run`
imports torch only when the script does, so its output stays python's in such an
environment, whether the script imports torch or not."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from conftest import trace_events
from neuraldbg_cli.cli import main
from neuraldbg_cli.thresholds import Thresholds, from_mapping

NUMPY_MISSING = "Failed to initialize NumPy"

SCRIPTS = {
    "imports_torch.py": """
        print("before torch", flush=True)
        import torch
        net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(3):
            loss = net(torch.randn(16, 4)).pow(2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
        print("done")
        """,
    "no_torch.py": """
        import sys
        print("torch loaded:", "torch" in sys.modules)
        print("to stderr", file=sys.stderr)
        """,
}


@pytest.fixture
def no_numpy(tmp_path):
    """An environment in which `import numpy` fails as if numpy were not installed."""
    stub = tmp_path / "stub" / "numpy"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(stub.parent), *filter(None, [os.environ.get("PYTHONPATH")])])}
    for name, source in SCRIPTS.items():
        (tmp_path / name).write_text(textwrap.dedent(source))
    return tmp_path, env


def _run(args, cwd, env):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=180)


def _own_lines_removed(stderr: str) -> str:
    return "".join(line for line in stderr.splitlines(keepends=True)
                   if not line.startswith("neuraldbg: "))


@pytest.mark.e2e
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_output_is_pythons_without_numpy(no_numpy, script):
    folder, env = no_numpy
    py = _run([script], folder, env)
    nd = _run(["-m", "neuraldbg_cli", "run", "--trace", "t.jsonl", script], folder, env)
    assert py.returncode == nd.returncode == 0, nd.stderr
    assert nd.stdout == py.stdout
    assert _own_lines_removed(nd.stderr) == py.stderr
    # the environment is really without numpy: torch warns there, and only there
    assert (NUMPY_MISSING in py.stderr) == (script == "imports_torch.py")
    events = trace_events(folder / "t.jsonl")
    if script == "no_torch.py":
        assert "torch loaded: False" in nd.stdout
        assert events[-1]["steps"] == 0
    else:   # observed from the script's own `import torch` on
        assert any(e["event"] == "model" for e in events)
        assert events[-1]["steps"] == 3


def test_thresholds_command_prints_the_annotated_defaults(capsys):
    assert main(["thresholds"]) == 0
    text = capsys.readouterr().out
    assert text.lstrip().startswith("#")           # annotated: comments say what each key does
    assert from_mapping(yaml.safe_load(text)) == Thresholds()

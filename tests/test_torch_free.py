"""The explaining wing runs where torch cannot even be imported: a trace from CI is explained
on any machine. Checked in a fresh interpreter whose import system refuses torch."""
import json
import os
import subprocess
import sys
from pathlib import Path

from tracemaker import dying_relu

REPO = Path(__file__).resolve().parents[1]

# Runs in the child: refuse torch, import every torch-free module, explain a trace twice.
CHILD = r'''
import contextlib, importlib, io, json, pkgutil, sys


class RefuseTorch:
    """A finder consulted before all others: any `torch` or `torch.*` import fails."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"torch is refused in this test: import of {name}")
        return None


sys.meta_path.insert(0, RefuseTorch())
assert "torch" not in sys.modules

import neuraldbg_cli.cli
import neuraldbg_cli.explain
import neuraldbg_cli.publish

names = ["neuraldbg_cli.states", "neuraldbg_cli.thresholds", "neuraldbg_cli.trace",
         "neuraldbg_cli.errors"]
for package in (neuraldbg_cli.explain, neuraldbg_cli.cli, neuraldbg_cli.publish):
    names += [f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__)]
for name in names:
    importlib.import_module(name)

from neuraldbg_cli.cli import main

outputs = []
for args in (["explain", sys.argv[1]], ["explain", "--json", sys.argv[1]]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(args)
    outputs.append({"rc": rc, "stdout": out.getvalue()})
print(json.dumps({"imported": names, "runs": outputs,
                  "torch_loaded": any(m == "torch" or m.startswith("torch.") for m in sys.modules)}))
'''


def test_explain_imports_and_runs_without_torch(tmp_path):
    trace = dying_relu().write(tmp_path / "t.jsonl")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    proc = subprocess.run([sys.executable, "-c", CHILD, trace], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert not result["torch_loaded"]
    assert {"neuraldbg_cli.explain.analysis", "neuraldbg_cli.explain.report",
            "neuraldbg_cli.cli.main", "neuraldbg_cli.states"} <= set(result["imported"])
    text, as_json = result["runs"]
    assert text["rc"] == 0 and as_json["rc"] == 0
    assert "#1 dead activation in net.3 (ReLU) at step 41 | cause learning_rate" in text["stdout"]
    top = json.loads(as_json["stdout"])["hypotheses"][0]
    assert (top["rank"], top["symptom"], top["layer"], top["step"], top["cause"]) == \
        (1, "dead", "net.3", 41, "learning_rate")

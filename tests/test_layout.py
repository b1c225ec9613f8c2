"""The code stays in parts small enough to read whole: no module over 300 lines, no class over
200, no function over 60 (the package and the benchmark). A part that outgrows them is split
by what it does, as hooks.py was into the per-call, once-per-forward and optimizer-step hooks."""
import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LIMITS = {"module": 300, "class": 200, "function": 60}


def oversized(path: Path) -> list:
    """[(what, name, lines)] of the parts of one file over their limit."""
    text = path.read_text(encoding="utf-8")
    found = []
    if len(text.splitlines()) > LIMITS["module"]:
        found.append(("module", path.name, len(text.splitlines())))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            what = "class"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            what = "function"
        else:
            continue
        lines = node.end_lineno - node.lineno + 1
        if lines > LIMITS[what]:
            found.append((what, node.name, lines))
    return found


@pytest.mark.parametrize("folder", ["neuraldbg_cli", "bench"])
def test_no_part_over_its_size_limit(folder):
    files = sorted((REPO / folder).rglob("*.py"))
    assert files
    over = {str(p.relative_to(REPO)): found for p in files if (found := oversized(p))}
    assert not over, over


def test_the_limits_are_checked(tmp_path):
    long = tmp_path / "long.py"
    long.write_text("class A:\n    def f(self):\n" + "        x = 1\n" * 301)
    assert {what for what, _, _ in oversized(long)} == {"module", "class", "function"}

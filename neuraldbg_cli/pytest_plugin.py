"""A pytest plugin for projects that smoke-test their training in their own test suites:

    def test_one_epoch_trains(neuraldbg):              # observes the training in this test
        train(model, loader, epochs=1)

    @pytest.mark.neuraldbg(fail_on="dead,nonfinite,exploding")
    def test_deep_model(neuraldbg): ...

The test fails when a listed state was detected (by default dead,nonfinite), and its failure
message is the explanation `neuraldbg explain` would print. The fixture is a NeuralDbg
(`.transitions`, `.failures()`, `.trace`); keyword arguments of the marker go to it (model,
thresholds, every, fail_on). Installed with neuraldbg (the `pytest11` entry point)."""
from __future__ import annotations

import pytest

DEFAULT_FAIL_ON = "dead,nonfinite"
_KEY = pytest.StashKey()


class MonitoringOffWarning(UserWarning):
    """A fault switched monitoring off during the test: its verdict covers part of it."""


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "neuraldbg(fail_on='dead,nonfinite', model=None, thresholds=None, every=1): "
                   "options of the neuraldbg fixture")


@pytest.fixture
def neuraldbg(request, tmp_path):
    """Observes the training done in the test; fails the test on the marker's states."""
    from .observe.api import NeuralDbg

    marker = request.node.get_closest_marker("neuraldbg")
    options = dict(marker.kwargs) if marker is not None else {}
    options.setdefault("fail_on", DEFAULT_FAIL_ON)
    dbg = NeuralDbg(trace=str(tmp_path / "neuraldbg-trace.jsonl"), **options)
    dbg.__enter__()
    request.node.stash[_KEY] = dbg
    try:
        yield dbg
    finally:
        _close(dbg, None)           # (a no-op once the test's call closed it)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """After the test body: close the observation and fail the test on its states. Here,
    not in the fixture's teardown, so that pytest reports a failed test, not an error.
    (An old-style wrapper: a plugin every pytest loads must not break an older one.)"""
    outcome = yield
    dbg = item.stash.get(_KEY, None)
    if dbg is None:
        return
    error = outcome.excinfo[1] if outcome.excinfo else None
    _close(dbg, error)
    if dbg.unobserved_from is not None:    # (a pass then speaks of the steps before it only)
        step, why = dbg.unobserved_from
        item.warn(MonitoringOffWarning(f"neuraldbg: not observed from step {step} on: "
                                       f"monitoring was switched off ({why})"))
    if error is None and dbg.failed:
        failure = pytest.fail.Exception(explanation(dbg), pytrace=False)
        if hasattr(outcome, "force_exception"):         # pluggy >= 1.1
            outcome.force_exception(failure)
        else:  # pragma: no cover
            raise failure


def _close(dbg, error) -> None:
    session = dbg.session
    if session is None or session._finished:
        return
    if error is None:
        dbg.__exit__(None, None, None)
    else:
        dbg.__exit__(type(error), error, error.__traceback__)


def explanation(dbg) -> str:
    """What `neuraldbg explain` prints for the test's trace, as plain text."""
    import io

    from rich.console import Console

    from .explain.analysis import analyze
    from .explain.report import render, theme
    from .trace import open_trace

    states = ",".join(sorted({t["to"] for t in dbg.failures(dbg.fail_on)}))
    out = io.StringIO()
    Console(file=out, theme=theme(), width=100, color_system=None, highlight=False,
            emoji=False, markup=False).print(render(analyze([open_trace(dbg.trace)])))
    return f"neuraldbg: {states} detected in the training (trace: {dbg.trace})\n\n{out.getvalue()}"

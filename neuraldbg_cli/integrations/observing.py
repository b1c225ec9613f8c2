"""What both callbacks do: observe one fit, stop it on chosen states, and tell the likely
hypotheses at the end through the framework's logger."""
from __future__ import annotations

from ..observe.api import NeuralDbg
from ..states import parse_signals
from ..thresholds import parse_states


class Observation:
    """One fit observed: started on the model the trainer holds, closed once, explained."""

    def __init__(self, trace: str, fail_on, stop_on, thresholds, every: int, framework: str,
                 detectors=None, capture=None):
        self.trace, self.every, self.thresholds = trace, every, thresholds
        self.detectors = parse_signals(detectors, what="detectors")
        self.fail_on = fail_on
        self.stop_on = parse_states(stop_on, what="stop_on") if isinstance(stop_on, str) \
            else tuple(stop_on or ())
        self.framework, self.capture = framework, capture
        self.dbg: NeuralDbg | None = None
        self._monitor = None                # where the framework's counter paces the steps
        self._stopped = False

    def start(self, model, framework_steps: bool = False) -> None:
        """framework_steps: steps end at `batch_end` when the framework's counter moved,
        rather than at the first optimizer's step."""
        if self.dbg is not None:
            self.close()                    # a second fit with the same callback: a new trace
        # The one stop of `run` and NeuralDbg (observe/stopper.py), in its gentle form: the
        # update of the step where the failure counts is withheld (a non-finite gradient is
        # never applied), then the trainer is asked to stop at the batch's end.
        self.dbg = NeuralDbg(model, trace=self.trace, thresholds=self.thresholds,
                             fail_on=self.fail_on, every=self.every, detectors=self.detectors,
                             stop_on=self.stop_on, capture=self.capture, stop_mode="skip")
        self.dbg.__enter__()
        self._monitor = self.dbg.session.monitor if framework_steps else None
        if self._monitor is not None:
            self._monitor.clock.optim.framework_paced = True
        self._stopped = False

    def batch_end(self, global_step: int) -> None:
        """After each training batch: the framework's step count (where it paces the steps)."""
        if self._monitor is not None and self._monitor.active:
            self._monitor.framework_step(global_step)

    def before_update(self, optimizer) -> None:
        """After the gradients are computed, before the optimizer applies them (where the
        framework computes them inside `optimizer.step(closure)`): the stop's check."""
        session = self.dbg.session if self.dbg is not None else None
        if session is not None and session.stopper is not None:
            session.stopper.before_step(getattr(optimizer, "optimizer", optimizer))

    def should_stop(self) -> list:
        """[the onset transition] of the failure that stopped training (once: the trainer is
        told once); [] while it goes on. Checked where `run` would stop (stopper.py), and
        here at each batch's end, for a failure counted at the fit's last step."""
        if self.dbg is None or self._stopped or not self.stop_on:
            return []
        found = self.dbg.failures(self.stop_on) if self.dbg.stopped is None else \
            [t for t in self.dbg.failures(self.stop_on) if t["to"] == self.dbg.stopped.state]
        self._stopped = bool(found)
        return found[:1]

    def close(self, error: BaseException | None = None, global_step: int | None = None) -> None:
        dbg = self.dbg
        if dbg is None or dbg.session is None or dbg.session._finished:
            return
        if global_step is not None:
            dbg.session._emit({"event": "framework", "name": self.framework,
                               "global_step": global_step, "steps": dbg.steps})
        if error is None:
            dbg.__exit__(None, None, None)
        else:
            dbg.__exit__(type(error), error, error.__traceback__)

    @property
    def failed(self) -> bool:
        return self.dbg is not None and self.dbg.failed

    def explained(self) -> list:
        """The likely hypotheses of the trace, a line each (what the logger says)."""
        from ..explain.analysis import analyze
        from ..publish import text
        from ..trace import open_trace

        if self.dbg is None:
            return []
        analysis = analyze([open_trace(self.dbg.trace)])
        lines = [f"neuraldbg: #{h.position} {text.headline(h)}: {h.summary} Fix: {h.fix}"
                 for h in text.likely(analysis)[:5]]
        return lines or [f"neuraldbg: {self.dbg.steps} steps, no failure found "
                         f"(trace: {self.dbg.trace})"]


class Observing:
    """The callbacks' common part (mixed in before the framework's own Callback class).

    trace: the JSONL trace; fail_on: the states of `.failed`; stop_on: states that stop
    training (e.g. "nonfinite,dead"); thresholds: a Thresholds or YAML path; every: observe
    every N-th step; detectors: the signals observed (default all), as NeuralDbg's; capture:
    the folder of the evidence of the first counted failure (default with stop_on:
    neuraldbg-capture)."""

    framework = ""

    def __init__(self, trace: str = "neuraldbg-trace.jsonl", *, fail_on: str | None = None,
                 stop_on=None, thresholds=None, every: int = 1, detectors=None,
                 capture: str | None = None):
        self.observation = Observation(trace, fail_on, stop_on, thresholds, every, self.framework,
                                       detectors, capture)

    @property
    def dbg(self):
        """The NeuralDbg of the last fit (`.transitions`, `.failures()`)."""
        return self.observation.dbg

    @property
    def failed(self) -> bool:
        return self.observation.failed


def stopping_message(found: list) -> str:
    first = min(found, key=lambda t: t["step"])
    return (f"neuraldbg: stopping training: {first['layer']} {first['signal']} {first['to']} "
            f"at step {first['step']}")

"""Observes every module the script calls: the parts wired together, and their faults.

The registry names modules and knows which detectors watch each; the clock says where steps
end; the hooks record every call; the judge reads each step's numbers once and writes the
transitions. A fault anywhere switches off what it touched, with a warning, never the run.
"""
from __future__ import annotations

import sys

from torch import nn

from ..thresholds import Thresholds
from . import detectors as detector_registry
from .backward import Backward
from .clock import StepClock
from .copies import ModelCopies
from .hooks import Hooks
from .judge import StepJudge, never_stepped
from .pairing import LossCalls
from .registry import Registry
from .residual import blocks_of
from .scaler import ScalerWatch
from .step_facts import StepFacts, outside_optimizers, trains_in_eval
from .tracker import Hysteresis
from .uneven import UnevenSteps
from .updates import UpdateSampler

# A NamedTuple's own __new__ is a Python function; tuple.__new__ builds the same record in C.
_new = tuple.__new__


class Monitor:
    """One instance per run or `with` block."""

    def __init__(self, thresholds: Thresholds, emit, *, model: nn.Module | None = None, warn=None,
                 every: int = 1, detectors: list | None = None, signals=None):
        """detectors: instances to run (default: one of each registered detector, or, with
        `signals`, of those whose signal is named)."""
        self.th = thresholds
        self.emit = emit                      # callable(event dict)
        self.warn = warn or (lambda msg: print(f"neuraldbg: {msg}", file=sys.stderr))
        self.clock = StepClock(every, emit)
        found = detector_registry.build(thresholds, signals) if detectors is None else detectors
        self.registry = Registry(found, thresholds.debounce_steps, self.clock, emit,
                                 self.fault, model, Hysteresis.of(thresholds, every))
        self.judge = StepJudge(thresholds, self.registry, emit, self.fault)
        self.hooks = Hooks(self.registry, self.clock, self.end_step_safely, self.fault)
        self.hooks.updates = UpdateSampler(thresholds.update.sample)
        # the loss and the loop, when some detector watches them
        pseudo = self.registry.loss.watching or self.registry.loop.watching
        self.backward = self.hooks.backward = Backward(self.fault) if pseudo else None
        self.loss_calls = self.hooks.loss_calls = LossCalls(
            self.clock, self.hooks, thresholds.output, self.fault) \
            if self.registry.output.watching else None
        if self.loss_calls is not None and self.backward is not None:
            self.backward.on_loss = self.loss_calls.saw_loss      # (hand-written losses)
            self.loss_calls.bare = self._no_module
        if self.backward is not None:
            self.backward.on_bare = self._bare_backward
        self.scaler = ScalerWatch(self.hooks, self.registry, self.fault) \
            if self.registry.scaler.watching else None
        self.copies = self.hooks.copies = ModelCopies(self.registry) \
            if self.registry.loss.watching else None
        self.uneven = UnevenSteps() if self.registry.loss.watching else None
        self.off = None             # (step, why) monitoring was switched off by a fault

    @property
    def steps(self) -> int:     # (completed steps)
        return self.clock.steps

    @property
    def step(self) -> int:
        return self.clock.step

    @property
    def active(self) -> bool:
        return self.hooks.active

    # ---- lifecycle -------------------------------------------------------------------
    def install(self, existing_optimizers: bool = False) -> None:
        """existing_optimizers: look for optimizers made before this call (a notebook)."""
        if self.registry.model is not None:
            self.registry.add_root_safely(self.registry.model)
        self.hooks.install(existing_optimizers, self._optimizer_created)
        for part, what in ((self.backward, "loss observation"),
                           (self.loss_calls, "loss-call observation"),
                           (self.scaler, "GradScaler observation")):
            if part is not None:
                try:
                    part.install()
                except Exception as e:  # noqa: BLE001 - the rest observes on
                    part.remove()
                    self.fault(f"{what} switched off", e)

    def _no_module(self) -> bool:
        """No module was called: the model is bare tensors (an optimizer may hold them)."""
        return not self.registry.roots

    def _bare(self) -> bool:
        """A model of bare tensors: no optimizer and no module called, ever."""
        clock = self.clock
        return not clock.optimizers_created and clock.optim.primary is None \
            and not self.registry.roots

    def _bare_backward(self) -> bool:
        """Each backward() of a model of bare tensors (`w = torch.randn(..., requires_grad=
        True)` updated by hand) is a step: the loss and the loop are judged on it."""
        if not self._bare():
            self.clock.saw_backward()
            return False
        if self.clock.pending_end:
            self._end_bare_step()
        self.clock.pending_end = True
        return True

    def _end_bare_step(self) -> None:
        hooks = self.hooks
        hooks.paced, hooks.renewed = True, self.backward.renewed_leaf()
        self.end_step_safely()

    def _optimizer_created(self, opt) -> None:
        clock = self.clock
        clock.optimizers_created += 1
        self.registry.hold(opt)
        if clock.optim.primary is None and (clock.steps or clock.pending_end):
            self.end_step_safely()
            clock.restart()

    def remove(self) -> None:
        self.hooks.remove()
        for part in (self.backward, self.loss_calls, self.scaler):
            if part is not None:
                part.remove()

    def close(self, completed: bool = True) -> None:
        """End of the run: classify a step in progress, unhook; report the recoveries the
        hysteresis held back, and after a crash or an interrupt, the states that had no time
        to be confirmed."""
        hooks = self.hooks
        if hooks.active and self.clock.pending_end and self._bare():
            self._end_bare_step()           # (the last backward of bare tensors)
        elif hooks.active and self.clock.pending_end and (completed or backward_ran(self.backward)):
            self.end_step_safely()          # (the last forward of a script without optimizer)
        elif hooks.active and (hooks.touched or hooks.grads or self.clock.pending_end):
            self.end_step_safely(complete=False)    # (a crash before that forward's backward)
        if hooks.active:    # (the steps still being read; a run that never stepped)
            self._guarded(self.judge.drain)
            self._guarded(never_stepped, self.judge, self.clock, self.backward)
        self.remove()
        for rec in [*self.registry.layers(), *blocks_of(self.registry)]:
            for watch in rec.watching:
                t = watch.tracker.flush(completed)
                if t is not None:
                    self.judge.write(rec, watch.detector.signal.name, t)

    # ---- step end --------------------------------------------------------------------
    def framework_step(self, global_step: int) -> None:
        """The framework's step counter after a batch, where it paces the steps (the
        callbacks set `clock.optim.framework_paced`): when it moved, the step ends, and the
        next one is numbered by it (the trace's steps are the framework's)."""
        if global_step > self.clock.step:
            self.end_step_safely(to=global_step)

    def end_step_safely(self, complete: bool = True, to: int | None = None) -> None:
        """end_step, but a fault there switches monitoring off instead of ending training."""
        if not self.hooks.active:
            self.clock.advance(complete, to)
            return
        try:
            self.end_step(complete, to)
        except Exception as e:  # noqa: BLE001
            self.hooks.take()
            self.hooks.normed, self.hooks.blocks = [], []
            self._switch_off(e)     # (dated at the step whose numbers were lost)
            self.clock.advance(complete, to)

    def end_step(self, complete: bool = True, to: int | None = None) -> None:
        clock, registry = self.clock, self.registry
        clock.pending_end = False
        registry.scan_compiled_once()
        recs, grads, inputs_checked = self.hooks.take()
        normed, self.hooks.normed = self.hooks.normed, []
        blocks, self.hooks.blocks = self.hooks.blocks, []
        self.judge.end_step(clock.step, recs, grads, inputs_checked, self._facts(recs), normed,
                            blocks)
        observing = clock.advance(complete, to)
        if complete and clock.purge_due():
            registry.purge()
        self.hooks.new_step(observing)

    def _facts(self, recs: list) -> StepFacts:
        """The step's own facts, gathered as it ends."""
        hooks, backward, clock = self.hooks, self.backward, self.clock
        losses, resets, first_grad = backward.take() if backward is not None and backward.active \
            else ([], 0, None)
        optimized, hooks.paced = hooks.paced, False
        renewed, hooks.renewed = hooks.renewed, None
        eval_roots = trains_in_eval(hooks.eval_roots, self.registry.owners, hooks.eval_trained) \
            if optimized and hooks.eval_roots else []
        scaler = self.scaler.take(clock.optim.primary and clock.optim.primary()) \
            if self.scaler is not None else None
        # (a step a GradScaler skipped updated nothing: no layer's update is judged)
        doubled = optimized and clock.optim.doubled()
        uncovered = outside_optimizers(recs, self.registry, doubled) \
            if optimized and hooks.updates is not None and not (scaler and scaler["skipped"] is True) \
            else []
        call = self.loss_calls.take() if self.loss_calls is not None else None
        idle, cut = backward.ungraded(optimized) if backward is not None else (False, False)
        uneven = self.uneven is not None and self.uneven.take(hooks, backward)
        return _new(StepFacts, (losses, first_grad, resets, renewed, optimized,
                                clock.optim.several(), eval_roots, uncovered, call, idle, scaler,
                                self.copies is not None and self.copies.check(), uneven, doubled,
                                cut and not uncovered))

    # ---- faults ----------------------------------------------------------------------
    def _guarded(self, work, *args) -> None:
        try:
            work(*args)
        except Exception as e:  # noqa: BLE001 - a monitor fault must not end the run
            self._switch_off(e)

    def _switch_off(self, error: BaseException) -> None:
        self.hooks.active = self.hooks.observing = False
        self.off = (self.clock.step, f"{type(error).__name__}: {error}")
        self.fault("monitoring switched off", error)

    def fault(self, what: str, error: BaseException, layer=None) -> None:
        msg, where = f"{what}: {type(error).__name__}: {error}", fault_site(error)
        self.warn(f"{msg} (at {where})" if where else msg)
        self.emit(warning_event(self.clock.step, layer, msg, where))


def warning_event(step: int, layer, message: str, where: str | None) -> dict:
    """A fault's warning; `where` (fault_site) is where to look, in a report of it."""
    event = {"event": "warning", "step": step, "layer": layer, "message": message}
    if where:
        event["where"] = where
    return event


def backward_ran(backward) -> bool:
    """Whether backward() ran in the step in progress (True where it is not watched)."""
    return backward is None or not backward.active or backward.backwards > 0


def fault_site(error: BaseException) -> str | None:
    """'observe/handwritten.py:103': the innermost line of neuraldbg's own code the error
    passed through (None: none did, or it carries no traceback)."""
    tb, site = error.__traceback__, None
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        if _PACKAGE in path:
            site = f"{path.rsplit(_PACKAGE, 1)[1]}:{tb.tb_lineno}"
        tb = tb.tb_next
    return site


_PACKAGE = "/neuraldbg_cli/"

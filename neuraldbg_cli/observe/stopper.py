"""`--stop-on` and `--capture`: at each optimizer's pre-step, the verdict asked whether a
failure now counts; if so the evidence is captured and, for a `stop_on` state, the update
is withheld and the script stopped.

The same episodes as `--fail-on` (verdict.py, through `Session.failures`). A counted
failure is acted on at the next optimizer step, before its update. A non-finite gradient
would be written into the weights by the very step it comes with, and the step's numbers are
judged after it (on a GPU, read a step or more late): so, while a stop or a capture is
wanted, the gradients about to be applied are checked first: on an observed step, their
norms, which the gradient monitoring takes anyway, are taken at the pre-step instead of the
step end and read once (one host read per optimizer step); on other steps, one fused norm
over them. Only when they are not finite is the step judged there and then.

Two ways to stop, one decision: `raise` (`run` and `NeuralDbg`) raises TrainingStopped out
of `optimizer.step()`, and again at every later step; `skip` (the Lightning and Hugging Face
callbacks, which then ask the trainer to stop) clears the gradients of that step and of
every later one, so that no update is applied.
"""
from __future__ import annotations

import math
import weakref

import torch

from ..states import failure_names
from ..stopping import TrainingStopped
from . import capture
from .evidence import Evidence
from .optimizers import local_shard
from .residual import blocks_of
from .samples import SampleIndices


def nonfinite_grads(opt) -> bool:
    """Whether a gradient `opt` is about to apply holds a NaN or an infinity."""
    grads = [local_shard(p.grad) for g in opt.param_groups for p in g["params"]
             if p.grad is not None and not p.grad.is_sparse]
    if not grads:
        return False
    norms = torch._foreach_norm(grads)
    home = norms[0].device
    total = torch.stack([n.to(home, torch.float32) for n in norms]).sum()
    if bool(total.isfinite()):
        return False
    # (a norm also overflows on huge finite values: make sure, on this rare path)
    return any(not bool(torch.isfinite(g).all()) for g in grads)


class Stopper:
    """Acts on the first counted failures of one run (see the module docstring)."""

    def __init__(self, session, monitor, states, folder: str | None, mode: str = "raise"):
        self.session, self.monitor = session, monitor
        self.states = tuple(states)
        self.folder = folder
        self.raises = mode == "raise"
        self.samples = SampleIndices() if folder is not None else None
        self.evidence = Evidence(monitor.clock, self.samples)
        self.stopped: TrainingStopped | None = None
        self.captured: dict | None = None       # the capture event written
        self._capture_due = folder is not None
        self._signs = bool(set(self.states) - set(failure_names()))
        self._opt = None

    def install(self) -> None:
        hooks = self.monitor.hooks
        hooks.stopper, hooks.evidence = self, self.evidence
        if self.monitor.loss_calls is not None:
            self.monitor.loss_calls.evidence = self.evidence
        if self.samples is not None:
            self.samples.install()

    def remove(self) -> None:
        if self.samples is not None:
            self.samples.remove()
        hooks = self.monitor.hooks
        hooks.evidence = None
        if self.monitor.loss_calls is not None:
            self.monitor.loss_calls.evidence = None

    @property
    def wanted(self) -> bool:
        return bool(self.states) or self._capture_due

    def before_step(self, opt) -> None:
        """The optimizer's pre-step hook: raises TrainingStopped (or withholds the update)."""
        if self.stopped is not None:
            self._withhold(opt)
            return
        if not self.wanted:
            return
        self._opt = weakref.ref(opt)
        # A GradScaler's fused optimizer gets its gradients still scaled, and the inf check
        # with them: it skips the update itself; they are read after its step, unscaled.
        if not isinstance(getattr(opt, "found_inf", None), torch.Tensor):
            self._check_gradients(opt)
        found = self._counted()
        if found is not None:
            self._act(found, opt)

    def after_skip(self, opt) -> None:
        """A GradScaler skipped `opt`'s step (no pre-step ran, nothing was applied): a failure
        counted by the step's end stops the run there, out of `scaler.step()`."""
        if self.stopped is None and self.wanted:
            found = self._counted()
            if found is not None:
                self._act(found, opt)

    def _check_gradients(self, opt) -> None:
        """A non-finite gradient about to be applied: its step judged now, so that it counts."""
        batch = self._normed(opt)
        if batch is not None:
            norms = batch.tensors
            # (on the CPU each 0-d norm is read as it is: four ops fewer than one stacked read)
            bad = not all(map(math.isfinite, map(float, norms))) if norms[0].is_cpu else \
                not bool(torch.stack(norms).sum().isfinite())
        else:
            bad = nonfinite_grads(opt)
        if bad:
            self._judge_now(batch)

    def _normed(self, opt):
        """On an observed step, the gradient norms the step end would take anyway, taken now
        and handed over to it (hooks.prenormed): the check then costs one host read. None
        when they do not cover every gradient of `opt` (some parameter in no layer)."""
        m = self.monitor
        hooks = m.hooks
        hooks.prenormed = None
        if not (hooks.active and hooks.observing) or hooks.grads_off:
            return None
        batch = m.clock.optim.grad_norms(opt, m.registry.owners)
        if batch is None or len(batch.tensors) != sum(
                p.grad is not None for g in opt.param_groups for p in g["params"]):
            return None
        hooks.prenormed = (opt, batch)
        return batch

    def _judge_now(self, batch) -> None:
        """The step judged before its update: its non-finite gradient then counts."""
        m = self.monitor
        hooks = m.hooks
        if not hooks.active:
            return
        if batch is not None:
            hooks.grads.append(batch)
            hooks.prenormed = None
        m.end_step_safely(complete=False)
        if hooks.active:
            m.judge.drain()

    def _counted(self) -> dict | None:
        """The first counted failure not yet acted on: in the stop states, else (while a
        capture is due) in any failure state; ties in the order the trace wrote them."""
        ledger = self.session.ledger
        if not (ledger.has_episodes() or self._signs):
            return None
        states = set(self.states)
        if self._capture_due:
            states |= set(failure_names())
        found = self.session.failures(states)
        if not found:
            return None
        found = [t for t in found if not self._recovering(t)]
        if not found:
            return None
        order = {id(t): i for i, t in enumerate(self.session.transitions)}
        found.sort(key=lambda t: (t["step"], order.get(id(t), 0)))
        return next((t for t in found if t["to"] in self.states), found[0])

    def _recovering(self, t: dict) -> bool:
        """An open episode whose layer is already back to health, its recovery not yet
        confirmed (a recovery is dated to its first healthy step): it counts only if it had
        held long enough before that step; else the verdict may still call it a blip."""
        entry = self.session.ledger._open.get((t["layer"], t["signal"]))
        if entry is None or entry[0] is not t:
            return False
        m = self.monitor
        try:
            for rec in [*m.registry.layers(), *blocks_of(m.registry)]:
                for watch in rec.watching:
                    tracker = watch.tracker
                    if watch.detector.signal.name == t["signal"] and tracker._candidate \
                            == tracker.ok and m.registry.name_of(rec) == t["layer"]:
                        return not self.session.ledger.rule.counts(
                            t["to"], tracker._since - t["step"], False, False, entry[1],
                            t.get("stats"))
        except Exception:  # noqa: BLE001 - then the ledger's word stands
            pass
        return False

    def _act(self, found: dict, opt) -> None:
        stop = found["to"] in self.states
        if stop:        # (decided before the capture: a SIGTERM during it finds it stopped)
            self.stopped = TrainingStopped(found["to"], found["signal"], found["layer"],
                                           found["step"], self.monitor.clock.step)
            if self.session.on_stop is not None:
                self.session.on_stop()
        if self._capture_due:
            self._capture_due = False
            self.write_capture(found, opt)
            if stop and self.captured is not None:
                self.stopped.capture = self.captured["path"]
        if stop:
            self._withhold(opt)

    def _withhold(self, opt) -> None:
        if self.raises:
            s = self.stopped
            raise TrainingStopped(s.state, s.signal, s.layer, s.step, s.at, s.capture)
        for group in opt.param_groups:
            for p in group["params"]:
                p.grad = None

    def write_capture(self, found: dict, opt=None) -> None:
        """Writes the capture of `found` (a transition) and its trace event; a fault is a
        warning, never the run's end."""
        m, s = self.monitor, self.session
        opt = opt if opt is not None else (self._opt() if self._opt is not None else None)
        hooks = m.hooks
        saved = hooks.active, hooks.observing, hooks._depth
        hooks.active = hooks.observing = False
        self.evidence.paused = True
        try:
            layer = next((e[0]() for e in m.registry.names.values()
                          if e[1] == found["layer"]), None)
            _, event = capture.write(self.folder, s.rank, s.world_size, found, self.evidence,
                                     layer, m.registry.name, opt, s.warn)
            self.captured = event
            s._emit({"event": "capture", **event})
        except Exception as e:  # noqa: BLE001 - the evidence is lost, not the run
            s.warn(f"capture not written: {type(e).__name__}: {e}")
        finally:
            hooks.active, hooks.observing, hooks._depth = saved
            self.evidence.paused = False

    def at_end(self) -> None:
        """The run is over: a failure counted only now (held to the end, or judged at the
        last step) still gets its capture, from the last step's inputs."""
        if not self._capture_due:
            return
        self._capture_due = False
        found = self.session.failures(failure_names())
        if found:
            self.write_capture(found[0])

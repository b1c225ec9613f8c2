"""The step end: the step's numbers read at once, each watching detector's verdict, the
debounced transitions written."""
from __future__ import annotations

import math

from .detectors.base import Observation
from .kinds import LOOP_KIND, LOSS_KIND, OUTPUT_KIND, SCALER_KIND, SIGMOID, TANH, UNIT_KINDS
from .norms import norm_facts, norm_tensors, norm_width
from .optimizer_judge import OptimizerJudge
from .pairing import REGRESSION_LOSSES
from .readout import Readout
from .residual import SUMS, residual_facts, residual_tensors
from .stats import collect, grad_values, layer_norm, unit_shares
from .summaries import Summary, SummaryClock
from .symmetry import due, spread_tensors, spreads
from .updates import UpdateBatch

# A NamedTuple's own __new__ is a Python function; tuple.__new__ builds the same record in C
# (this runs for every layer at every step).
_new = tuple.__new__


class StepJudge(OptimizerJudge):
    """Hands each layer's numbers to the detectors that watch it (verdicts.py writes what
    changed)."""

    def __init__(self, thresholds, registry, emit, fault, readout: Readout | None = None):
        self.tail = thresholds.smooth.tail
        self.min_grads = {SIGMOID: thresholds.sigmoid.min_grad, TANH: thresholds.tanh.min_grad}
        self.registry = registry
        self.emit = emit
        self.fault = fault                  # callable(what, error)
        self.readout = readout or Readout()
        self.growth = thresholds.residual.growth    # (a run of blocks: residual.py)
        self.decay_share = thresholds.gradient.decay_share
        # (when the units' spreads are read, symmetry.py: counting the steps whose updates
        # were sampled)
        self.symmetry = (thresholds.update.symmetric_first, thresholds.update.symmetric_every)
        self.updated = 0
        self.summaries = SummaryClock(thresholds.summary.every, thresholds.summary.points)
        self.loss_summaries = SummaryClock(thresholds.summary.loss_every,
                                           thresholds.summary.points)

    def end_step(self, step: int, recs: list, grads: list, inputs_checked: bool,
                 facts=None, normed=(), blocks=()) -> None:
        """Reduce and read step `step`'s numbers (the layers `recs`, the GradBatches and
        UpdateBatches `grads`, the step's own StepFacts, the layers `normed` with a norm
        reading, the residual `blocks` called); judge them now, or once read (see readout)."""
        if inputs_checked:
            # A layer right after an activation module reads that module's output: its input
            # check would only echo the activation's own verdict (compiled code cannot tell).
            for prev, rec in zip(recs, recs[1:]):
                if rec.acc.inputs is not None and prev.kind in UNIT_KINDS:
                    rec.acc.inputs = None
        # gradients to norm (raw) and norms already taken, each optimizer's in one of them
        raw, done = [], []
        for batch in grads:
            if type(batch) is not UpdateBatch or not batch.vector:
                (done if batch.normed else raw).extend(batch.tensors)
        tensors, plan = collect([r.acc for r in recs], self.tail, self.min_grads, raw, done,
                                reset=True)
        extra = facts.tensors() if facts is not None else ()
        norms, norm_jobs = norm_tensors(normed) if normed else ((), ())
        if norms:
            extra = [*extra, *norms]
        sums, block_jobs = residual_tensors(blocks) if blocks else ((), ())
        if sums:
            extra = [*extra, *sums]
        copies, copy_jobs = (), ()
        for batch in grads:
            if type(batch) is UpdateBatch:      # (a step whose updates were sampled)
                self.updated += 1
                if due(self.updated, *self.symmetry):
                    copies, copy_jobs = spread_tensors(grads)
                break
        if copies:
            extra = [*extra, *copies]
        if extra:
            tensors = tensors + extra if tensors else extra
        job = (step, recs, grads, plan, facts, len(extra), norm_jobs, block_jobs, copy_jobs)
        if tensors:
            for values, ready in self.readout.submit(tensors, job):
                self._judge(values, *ready)
        elif any(type(b) is UpdateBatch and b.vector for b in grads):  # (read on its own)
            self._judge([], *job)

    def drain(self) -> None:    # (the steps still being read, at the end of the run)
        for values, job in self.readout.drain():
            self._judge(values, *job)

    def _judge(self, values: list, step: int, recs: list, grads: list, plan, facts=None,
               n_extra: int = 0, norm_jobs=(), block_jobs=(), copy_jobs=()) -> None:
        tail = []                           # the step's own values (StepFacts.tensors)
        if n_extra:
            tail, values = values[-n_extra:], values[:-n_extra]
        copies = None
        if copy_jobs:                       # (the units' spreads close the tail: 2 a layer)
            k = len(tail) - 2 * len(copy_jobs)
            tail, read = tail[:k], tail[k:]
            copies = spreads(copy_jobs, read)
        if block_jobs:                      # (the residual sums close the tail: SUMS a block)
            k = len(tail) - SUMS * len(block_jobs)
            tail, read = tail[:k], tail[k:]
            self._judge_blocks(block_jobs, read, step)
        if norm_jobs:                       # (the norm readings close the tail)
            k = len(tail) - norm_width(norm_jobs)
            tail, read = tail[:k], tail[k:]
            normed = norm_facts(norm_jobs, read, step)   # (judged once the updates are known)
        told = facts.values(tail) if facts is not None else None  # (loss, first_grad, call, scaler)
        loss = told[0] if told is not None else None
        keep = Summary(step) if self.summaries.due(step) else None
        raw, done = [], []
        if values:
            self._judge_outputs(values, plan, recs, step, keep)
            raw, done = grad_values(values, plan)
        skipped = told and told[3] and told[3]["skipped"]   # (scaler: a skipped step)
        middle = self._judge_optimizers(() if skipped else grads, raw, done, recs, step, loss,
                                        keep, copies)
        if norm_jobs:
            for rec, f in normed:
                if middle is not None and "drift" in f:
                    f["moved"] = middle     # (batches apart while the weights move fast)
                self._observe(rec, rec.on_norm, _of_step(rec.kind, None, f), step)
        if facts is not None:
            self._judge_step(facts, told, step, keep, middle)
        if loss is not None and self.loss_summaries.due(step):
            if keep is None:
                keep = Summary(step)
            keep.add(self.registry.loss, "loss", loss)
        if keep is not None:
            for event in keep.events(self.registry.name_of):
                self.emit(event)

    def _judge_blocks(self, jobs: list, values: list, step: int) -> None:
        live = self.registry.detectors      # (a detector switched off has left it)
        for block, f in residual_facts(jobs, values, self.growth):
            watching = [w for w in block.watching if w.detector in live]
            if watching:
                self._observe(block, watching, _of_step(block.kind, None, f), step)

    def _judge_outputs(self, values: list, plan, recs: list, step: int, keep=None) -> None:
        """Each layer's output numbers, read straight from the plan's slots (no record per
        layer in between: this runs for every layer at every step), to its detectors; and to
        `keep`, the step's Summary, when the step is summarised."""
        done = plan.n_done
        shares, sats = unit_shares(values, plan)
        for rec, slot in zip(recs, plan.slots):
            r, k, p, m, u, i, s, count, numel = slot
            if k + m == 1:      # one call, the common case: its one norm (layer_norm, inlined)
                norm = values[r] if k else values[done + p]
            else:
                norm = layer_norm(values, slot, done)
            rms = norm / math.sqrt(numel) if math.isfinite(norm) else norm
            x = _new(Observation, (rec.kind, rms, None if u is None else shares[u],
                                   None if i is None else shares[i],
                                   None if s is None else sats[s], count, rec.is_output,
                                   None, None, None, None, None))
            if keep is not None and rec.on_output:
                keep.add_output(rec, x)
            for detector, history, tracker in rec.on_output:
                try:
                    state, extra = detector.judge(x, history)
                    detector.remember(x, history)
                    if state != tracker.steady:     # else nothing to write, no evidence to build
                        self._changed(rec, detector, tracker, x, state, extra, step)
                except Exception as e:  # noqa: BLE001 - only this detector stops
                    self._switch_off(detector, e)

    def _judge_step(self, facts, told: tuple, step: int, keep=None, moved=None) -> None:
        """The pseudo-layers and the layers outside every optimizer; `told`: StepFacts.values;
        `keep`: the step's Summary (the targets' classes); `moved`: the median update ratio."""
        loss, first_grad, call, scaler = told
        reg = self.registry
        if loss is not None and reg.loss.on_output:
            x = _of_step(LOSS_KIND, loss, _loss_facts(facts, moved, call))
            self._observe(reg.loss, reg.loss.on_output, x, step)
        if scaler is not None and reg.scaler.on_output:     # (a GradScaler's step)
            self._observe(reg.scaler, reg.scaler.on_output, _of_step(SCALER_KIND, None, scaler), step)
        if facts.optimized and reg.loop.on_output:
            x = _of_step(LOOP_KIND, None, _loop_facts(facts, first_grad))
            self._observe(reg.loop, reg.loop.on_output, x, step)
        if call is not None and reg.output.on_output:
            if facts.several:       # (read steps only: a few dozen a doubling of the run)
                call = {**call, "several": True}
            self._observe(reg.output, reg.output.on_output, _of_step(OUTPUT_KIND, None, call), step)
            if keep is not None and call.get("target_classes") is not None:
                for key in ("target_classes", "units", "rows"):
                    keep.add(reg.output, key, call.get(key))
        said = _IN_SHARED if facts.doubled else _IN_NO_OPTIMIZER
        for rec in facts.uncovered:
            self._observe(rec, rec.on_update, _of_step(rec.kind, None, said), step)


NO_STEP_BACKWARDS = 3   # backward() calls in a run without one optimizer step: a mistake


def never_stepped(judge: StepJudge, clock, backward) -> None:
    """At the run's end: an optimizer made, backward() called NO_STEP_BACKWARDS times or more,
    and no optimizer step at all. Every iteration was one step that never ended (a
    scheduler's step() called instead of the optimizer's): told once, to the loop detector."""
    reg = judge.registry
    if clock.steps == 0 and clock.optimizers_created and backward is not None \
            and backward.total >= NO_STEP_BACKWARDS and reg.loop.on_output:
        x = _of_step(LOOP_KIND, None, {"no_step": backward.total})
        judge._observe(reg.loop, reg.loop.on_output, x, clock.step)


def _of_step(kind: str, loss, facts) -> Observation:
    """An Observation of a step-level signal: only its loss and facts (built in C)."""
    return _new(Observation, (kind, None, None, None, None, None, False, None, None, None, loss,
                              facts))


def _loop_facts(facts, first_grad) -> dict:
    return {"reset": facts.reset(first_grad), "eval_roots": facts.eval_roots,
            "no_backward": facts.no_backward, "no_gradient": facts.no_gradient}


def _loss_facts(facts, moved, call) -> dict | None:
    """What the loss detector is told: several optimizers, or the step's median update ratio
    and, on steps whose pairing was read, the scales of a regression's output and targets."""
    if facts.several:
        return _SEVERAL
    if facts.moving_targets:
        return _MOVING_TARGETS
    if facts.uneven:
        return _UNEVEN
    told = {} if moved is None else {"moved": moved}
    if call is not None and call.get("rows") == 1:
        told["one_row"] = True      # (one sample's error a step: a noisy loss)
    if call is not None and call.get("loss_fn") in REGRESSION_LOSSES:
        o = max(abs(call["output_min"]), abs(call["output_max"]))
        t = max(abs(call["target_min"]), abs(call["target_max"]))
        if math.isfinite(o) and math.isfinite(t):
            told["scales"] = (o, t)
    return told or None


_SEVERAL = {"several": True}
_MOVING_TARGETS = {"moving_targets": True}
_UNEVEN = {"uneven": True}
_IN_NO_OPTIMIZER = {"in_no_optimizer": True}
_IN_SHARED = {"in_no_optimizer": True, "shared_optimizers": True}   # (StepFacts.doubled)

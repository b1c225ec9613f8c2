"""Cause rule for mistakes of the training loop itself: gradients never reset, training in
eval() mode, parameters in no optimizer (or never changed), a graph cut before a layer."""
from __future__ import annotations

from .. import states
from . import rates
from .finding import Finding

LOOP = states.LOOP.name
UPDATE = states.UPDATE.name


def loop_mistake(ep, ctx):
    """The loop, not the model, the data or the hyperparameters: a state of the (loop)
    pseudo-layer, or a layer that never learns although its parameters get gradients."""
    if ep.signal == LOOP:
        return _loop_state(ep)
    if ep.signal == UPDATE and ep.state == "frozen":
        if ep.stats.get("in_no_optimizer") and ep.stats.get("shared_optimizers"):
            return _finding(ep, 0.9, "two optimizers step the same parameters and none holds "
                            "this layer's (was one built over another model's parameters, a "
                            "generator's optimizer given the discriminator's?)",
                            f"{ep.layer}'s parameters got gradients from step {ep.onset} but are "
                            "in no optimizer, while two optimizers stepped the same parameters")
        if ep.stats.get("in_no_optimizer"):
            return _finding(ep, 0.9, "its parameters get gradients but no optimizer holds them "
                            "(was the layer replaced after the optimizer was built?)",
                            f"{ep.layer}'s parameters got gradients at step {ep.onset} but are in "
                            "no optimizer: its weights never change")
        decayed = _decayed(ep, ctx)
        if decayed is not None:
            return decayed
        if ep.stats.get("rate_zero") is True:
            return _rate_zero(ep, ctx)
        return _finding(ep, 0.9, "its parameters get gradients but the optimizer never changes "
                        "them (a learning rate of 0?)",
                        f"{ep.layer}'s weights did not change from step {ep.onset} although its "
                        "gradient is not zero")
    if ep.signal == UPDATE and ep.state == "detached":
        return _finding(ep, 0.9, "it gets no gradient while the layers after it do: the graph "
                        "is cut between it and the loss",
                        f"no gradient reached {ep.layer}'s parameters at step {ep.onset}, while "
                        "layers after it got theirs")
    return None


def _loop_state(ep) -> Finding | None:
    """A state of the (loop) pseudo-layer, in words."""
    if ep.state == "no_zero_grad":
        n = ep.stats.get("steps_without_reset")
        since = f" for {n} optimizer steps in a row" if isinstance(n, int) else ""
        return _finding(ep, 0.95, "the gradients are never reset, so every optimizer step applies "
                        "the sum of all the gradients so far",
                        f"no optimizer.zero_grad() (nor model.zero_grad(), nor gradients set to "
                        f"None){since} up to step {ep.onset}; gradient accumulation would reset "
                        "every few steps")
    if ep.state == "no_backward":
        return _finding(ep, 0.95, "the optimizer steps but backward() is never called, so "
                        "there is no gradient to apply and the model never learns",
                        f"no backward() and no gradient on the optimizer's parameters in the "
                        f"steps from {ep.onset}")
    if ep.state == "no_gradient":
        return _finding(ep, 0.95, "backward() runs but no gradient reaches the optimizer's "
                        "parameters: the loss is not computed from them (under torch.no_grad(), "
                        "through .detach(), .item() or numpy, or remade as a new tensor), so "
                        "the model never learns",
                        f"backward() called and not one of the optimizer's parameters with a "
                        f"gradient in the steps from {ep.onset}")
    if ep.state == "no_step":
        n = ep.stats.get("backwards")
        calls = f"{n} backward() calls" if isinstance(n, int) else "backward() calls"
        return _finding(ep, 0.95, "optimizer.step() is never called, so the gradients are "
                        "computed and never applied: the weights never change",
                        f"{calls} and not one optimizer step in the whole run")
    if ep.state == "eval_mode":
        models = ", ".join(map(str, ep.stats.get("models") or [])) or "the model"
        return _finding(ep, 0.9, f"{models} trained in eval() mode from step {ep.onset}: "
                        "model.eval() without model.train() after it",
                        f"{models} ran in eval() mode while the optimizer updated it (from step "
                        f"{ep.onset}): Dropout is off, BatchNorm uses its running statistics")
    return None


def _decayed(ep, ctx) -> Finding | None:
    """A layer frozen by a learning rate its schedule has cut to nothing: the steps became
    smaller than the weights' float precision (a per-epoch schedule stepped every batch)."""
    for seen in rates.by_optimizer(ctx.hparams(ep.run), ep.onset):
        # (from its highest: a warm-up may start at 0, as Hugging Face's linear schedule does)
        top = max(seen, key=lambda h: rates.peak(h["lr"]))
        first, now = rates.peak(top["lr"]), rates.peak(seen[-1]["lr"])
        if first > 0 and now <= first * DECAYED:
            name = seen[-1].get("optimizer", "the optimizer")
            cuts = len(seen) - 1 - seen.index(top)
            return Finding("learning_rate", 0.9, f"the learning rate was cut from "
                           f"{rates.shown(top['lr'])} to {rates.shown(seen[-1]['lr'])} by step "
                           f"{seen[-1]['step']}: its steps no longer change the weights (a "
                           "scheduler meant for epochs stepped every batch, or steps run past "
                           "the schedule's end?)",
                           (f"{ep.layer}'s weights stopped changing at step {ep.onset} although "
                            f"its gradient is not zero",
                            f"{name}'s learning rate fell from {rates.shown(top['lr'])} at "
                            f"step {top['step']} to {rates.shown(seen[-1]['lr'])} at step "
                            f"{seen[-1]['step']}, {cuts} cuts"),
                           "Step the learning-rate scheduler once per epoch (after the batch "
                           "loop), or size its step_size/milestones in batches; keep the rate "
                           "within ~100x of its start while training.")
    return None


DECAYED = 1e-3      # a rate cut this far below its start: no longer a schedule's annealing


def _rate_zero(ep, ctx) -> Finding:
    """A layer frozen while its optimizer's every learning rate was 0, never higher before:
    a warm-up from 0 (the steps change nothing until the rate rises), or a rate of 0 for
    good (the layer never learns)."""
    later = [h for h in ctx.hparams(ep.run) if h["step"] > ep.onset and rates.peak(h["lr"]) > 0]
    if ep.end is not None and later:
        rose = later[0]
        return Finding("learning_rate", 0.6, f"the learning rate was 0 until step {rose['step']} "
                       f"(a warm-up from 0): the steps before it change no weight",
                       (f"{ep.layer}'s weights did not change from step {ep.onset} to step "
                        f"{ep.end} although its gradient is not zero",
                        f"the learning rate rose from 0 to {rates.shown(rose['lr'])} at step "
                        f"{rose['step']}"),
                       "Nothing to fix if the warm-up is meant to start at 0; a warm-up from a "
                       "small rate (or one stepped per batch) lets the first steps learn.")
    return Finding("learning_rate", 0.9, "the learning rate is 0: the optimizer's steps "
                   "change no weight",
                   (f"{ep.layer}'s weights did not change from step {ep.onset} although its "
                    "gradient is not zero, at a learning rate of 0",),
                   "Give the optimizer a learning rate above 0 (a schedule's factor, or a "
                   "warm-up, may hold it at 0).")


def _finding(ep, strength: float, why: str, line: str) -> Finding:
    known = states.state_of(ep.signal, ep.state)
    return Finding("training_loop", strength, why, (line,), known.fix if known else "")

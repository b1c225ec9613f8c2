"""What a step tells beyond its layers: its loss, whether the gradients were reset before
it, which models trained in eval() mode, which layers got gradients outside every optimizer,
how its output met the loss."""
from __future__ import annotations

from typing import NamedTuple

import torch

from .naming import class_name
from .parametrized import own_parameters


class StepFacts(NamedTuple):
    losses: list            # 0-d loss tensors passed to backward() (unscaled)
    first_grad: object      # 0-d norm of the watched gradient before the first backward, or None
    resets: int             # zero_grad calls
    renewed: bool | None    # the watched gradient was set to None or replaced (None: unknown)
    optimized: bool         # the step ended with the pacing optimizer's step
    several: bool           # more than one optimizer stepped
    eval_roots: list        # names of models that trained in eval() mode
    uncovered: list         # layer records with gradients that no optimizer holds
    pairing: object = None  # the step's first loss call (pairing.LossCall), or None
    no_backward: bool = False   # the optimizer stepped with no backward() and no gradient
    scaler: dict | None = None  # a GradScaler's step: scale, skipped, overflow (scaler.py)
    moving_targets: bool = False    # a copy of a trained model ran without gradients (copies.py)
    uneven: bool = False    # the steps' counts of forwards change on most steps (uneven.py)
    doubled: bool = False   # two optimizers stepped some same parameters (OptimizerWatch)
    # the optimizer stepped after backward() on no gradient at all, and no layer outside it
    # got one (where one did, the optimizer holds another model's: that layer is `frozen`)
    no_gradient: bool = False

    def tensors(self) -> list:
        """The 0-d tensors to read with the step's others: the loss summed, the gradient."""
        out = []
        if self.losses:
            first = self.losses[0]
            out.append(first if len(self.losses) == 1 else
                       torch.stack([t.to(first.device) for t in self.losses]).sum())
        if self.first_grad is not None:
            out.append(self.first_grad)
        if self.pairing is not None:
            out += self.pairing.tensors
        if self.scaler is not None:
            out.append(self.scaler["scale"])
            if not isinstance(self.scaler["skipped"], bool):     # (a fused optimizer's check)
                out.append(self.scaler["skipped"])
        return out

    def values(self, values: list) -> tuple:
        """(loss, first_grad, the loss call's facts, the scaler's facts) from the values read
        for `tensors()`, None where absent."""
        it = iter(values)
        loss = next(it, None) if self.losses else None
        first_grad = next(it, None) if self.first_grad is not None else None
        pairing, scaler = self.pairing, self.scaler
        call = pairing.facts([next(it) for _ in pairing.tensors]) if pairing is not None else None
        if scaler is not None:
            scaler = {**scaler, "scale": next(it)}
            if not isinstance(scaler["skipped"], bool):
                scaler["skipped"] = next(it) > 0
        return loss, first_grad, call, scaler

    def reset(self, first_grad: float | None) -> bool | None:
        """Were the gradients reset since the last step? None: it cannot be told."""
        if self.resets or self.renewed or first_grad == 0.0:
            return True
        if self.renewed is False and first_grad is not None:
            return False
        return None


def outside_optimizers(recs: list, registry, doubled: bool = False) -> list:
    """The layers of the step (in forward order) whose parameters get gradients that no
    optimizer holds, after the first layer an optimizer does hold (all, where none is, or
    where two optimizers step the same parameters: `doubled`, a GAN's generator whose
    optimizer was given the discriminator's): the layers before it are a backbone left out
    of a fine-tune on purpose (an optimizer over the head alone), those after it were added
    or replaced once the optimizer was built.
    (A layer is known held once its optimizer steps; one whose optimizer has not stepped
    yet, a GAN's generator getting gradients from the discriminator's first steps, is held.)
    Where every optimizer holds plain tensors alone, the model is a fixed function of an
    input being optimised (style transfer leaving its VGG's requires_grad on): none."""
    owners = registry.owners
    first = -1 if doubled else next((i for i, r in enumerate(recs) if r.in_optimizer), -1)
    # (none held at all: the optimizer steps parameters the model no longer has)
    found = [r for r in recs[first + 1:] if r.on_update and not r.in_optimizer
             and (doubled or not r.frozen) and has_gradients(r, owners, doubled)]
    if found and first < 0 and _optimizes_inputs(registry):
        return []       # (the optimisers step an input, not the model: no layer is theirs)
    if found:
        held = registry.held()
        found = [r for r in found if not any(id(p) in held for p in _own(r)) and _unmoved(r)]
    return found


def _unmoved(rec) -> bool:
    """Whether the layer's weights are as they were when it was last found outside every
    optimizer (or it is found for the first time). A layer that no optimizer holds but whose
    weights something else writes, an A3C worker's local net loaded from the global one that
    its gradients step, is not frozen. Told by the parameters' version counters, which
    every in-place write moves (load_state_dict's copy, a manual update): nothing is read."""
    seen = tuple((id(p), p._version) for p in _own(rec))
    last, rec.weights_seen = rec.weights_seen, seen
    return last is None or last == seen


def _optimizes_inputs(registry) -> bool:
    """Some optimizer lives, and none holds a module's parameter: what is optimised is a
    plain tensor, an image fed to a fixed model (style transfer, feature visualisation)."""
    held = [p for r in registry.optimizers if (o := r()) is not None
            for g in o.param_groups for p in g["params"]]
    return bool(held) and not any(isinstance(p, torch.nn.Parameter) for p in held)


def _own(rec) -> list:
    """The parameters of the layer's own (none once its module is gone)."""
    module = rec.ref() if rec.ref is not None else None
    return [] if module is None else list(own_parameters(module))


def has_gradients(rec, owners: dict, toggled: bool = False) -> bool:
    """Some trainable parameter of the layer's own holds a gradient (a parameter shared with
    an earlier layer, tied weights, belongs to that layer); with `toggled`, trainable or not
    now (a GAN's loop sets requires_grad off for the model it does not step)."""
    return any(p.grad is not None and (toggled or p.requires_grad) and owners.get(id(p)) is rec
               for p in _own(rec))


def trains_in_eval(roots: dict, owners: dict, found: set) -> list:
    """The models (weakrefs in `roots`) last called in eval() mode, and in it still, whose
    parameters an optimizer updates and that got gradients: not a frozen teacher, a model
    being trained. (A decoder's layers called one by one in eval() to sample, then trained
    inside the model after model.train(), are no longer in eval() mode.) Their names; their
    ids are added to `found` (their eval() calls are observed from now)."""
    out = []
    for ref in list(roots.values()):
        root = ref()
        if root is not None and not root.training and any(
                p.grad is not None and (o := owners.get(id(p))) is not None and o.in_optimizer
                for p in root.parameters()):
            out.append(class_name(getattr(root, "module", root)))
            found.add(id(root))
    return out

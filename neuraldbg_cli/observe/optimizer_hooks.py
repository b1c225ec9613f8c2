"""The optimizer-step half of the hooks: the sampled update, the gradients normed, the
step's end. A part of `hooks.Hooks` (the attributes it reads are that class's)."""
from __future__ import annotations

from .updates import UpdateBatch


class OptimizerHooks:
    """Before and after each optimizer step (torch's global optimizer-step hooks)."""

    prenormed = None        # (optimizer, GradBatch) its gradients' norms, taken at the pre-step

    def _optimizer_stepping(self, opt, args, kwargs):
        """Before an optimizer step: a stop (stopper.py raises here, before the update),
        the sampled weights, to measure its update."""
        if self.stopper is not None:
            self.stopper.before_step(opt)
        if self.updates is not None and self.active and self.registry.updates_watched:
            try:
                if self.observing:
                    self.updates.before(opt, self.registry.owners)
                else:       # (the weights this step leaves are not the next one's before)
                    self.updates.skip(opt)
            except Exception as e:  # noqa: BLE001 - a monitor fault must not end the run
                self._updates_off(e)
        if self.backward is not None:
            self.backward.stepping(True)

    def _optimizer_stepped(self, opt, args, kwargs):
        if self._installed is None:
            return
        self.optimizer_steps += 1       # (a GradScaler's step that did not count this skipped)
        if self.backward is not None:
            self.backward.stepping(False)
        optim = self.clock.optim
        paces = self._paces(opt)
        if self.active:             # once switched off by a fault, steps are only counted
            try:
                optim.record_hparams(opt, self.clock.step)
                if not self.grads_off and self.observing:
                    # The pacing optimizer's step ends the step right here: its gradients
                    # can be normed with everything else, in the step end's one call.
                    pre, self.prenormed = self.prenormed, None
                    batch = pre[1] if pre is not None and pre[0] is opt else \
                        optim.grad_norms(opt, self.registry.owners, raw=paces)
                    if batch is not None:
                        self.grads.append(batch)
            except Exception as e:  # noqa: BLE001 - a monitor fault must not end the run
                self.grads_off, self.grads = True, []
                self._fault("gradient monitoring switched off", e)
            self._after_update(opt, paces)
        if paces and not optim.framework_paced:
            self._end_step()

    def optimizer_skipped(self, opt) -> None:
        """A GradScaler skipped `opt`'s step (its gradients overflowed): still a step, one
        with no update and no gradient to judge (scaler.py)."""
        if self._installed is None:
            return
        if self._paces(opt):
            self.paced = True
            if not self.clock.optim.framework_paced:
                self._end_step()
        if self.stopper is not None:
            self.stopper.after_skip(opt)

    def _paces(self, opt) -> bool:
        """Count a step of `opt`; True when its steps end the steps (optimizers.py)."""
        optim = self.clock.optim
        paces = optim.paces(opt)
        if optim.new_model:         # (a new phase: the loss and output are another model's)
            optim.new_model = False
            for rec in (self.registry.loss, self.registry.output):
                rec.fresh_histories()
        if optim.merged:            # (training in phases: count the steps merged at the handover)
            self.clock.steps += optim.merged
            self.clock.step += optim.merged
            optim.merged = 0
        return paces

    def _after_update(self, opt, paces: bool) -> None:
        """The sampled update of the step just taken; at the pacing step, the reset check."""
        try:
            if self.updates is not None:
                update = self.updates.after(opt, self.clock.optim.rate_zero(opt))
                if update is not None and not self.grads_off:
                    self.grads.append(update)
            if paces:
                self.paced = True
                if self.backward is not None and self.backward.active:
                    self.renewed = self.backward.renewed(opt)
        except Exception as e:  # noqa: BLE001 - a monitor fault must not end the run
            self._updates_off(e)

    def _updates_off(self, error) -> None:
        self.updates = None
        self.grads = [b for b in self.grads if not isinstance(b, UpdateBatch)]
        self._fault("update monitoring switched off", error)

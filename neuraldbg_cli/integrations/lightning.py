"""A Lightning callback: `Trainer(callbacks=[NeuralDbgCallback(stop_on="nonfinite")])`.

Observes the LightningModule during `fit` (layers named from it, `generator.0` rather than
the `0` of a submodule called directly), writes the trace, stops the fit when a `stop_on`
state is detected, and logs the likely hypotheses at the end through Lightning's logger.
Needs `pip install neuraldbg[lightning]`."""
from __future__ import annotations

import logging

try:
    from lightning.pytorch import Callback
except ImportError:  # pragma: no cover - the older package name
    from pytorch_lightning import Callback

from .observing import Observing, stopping_message

log = logging.getLogger("lightning.pytorch.callbacks.neuraldbg")


class NeuralDbgCallback(Observing, Callback):
    """Observes a Lightning fit; its options are Observing's (trace, fail_on, stop_on, ...)."""

    framework = "lightning"

    def on_fit_start(self, trainer, pl_module) -> None:
        # (each rank its own trace, as under torchrun). With manual optimisation, Lightning's
        # global_step counts each optimizer's step (a GAN's batch: 2): a step of the trace
        # is then a batch, numbered by global_step.
        self.observation.start(pl_module, framework_steps=not pl_module.automatic_optimization)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        # Lightning runs the forward and the backward inside optimizer.step(closure), after
        # torch's pre-step hooks: the stop's gradient check comes here, before the update.
        self.observation.before_update(optimizer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.observation.batch_end(trainer.global_step)
        found = self.observation.should_stop()
        if found:
            log.warning(stopping_message(found))
            trainer.should_stop = True

    def on_fit_end(self, trainer, pl_module) -> None:
        self.observation.close(global_step=trainer.global_step)
        if trainer.global_rank == 0:
            for line in self.observation.explained():
                log.info(line)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self.observation.close(exception, global_step=trainer.global_step)

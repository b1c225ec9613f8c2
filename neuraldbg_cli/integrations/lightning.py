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

from .observing import Observation, stopping_message

log = logging.getLogger("lightning.pytorch.callbacks.neuraldbg")


class NeuralDbgCallback(Callback):
    """trace: the JSONL trace; fail_on: the states of `.failed`; stop_on: states that stop
    the fit (e.g. "nonfinite,dead"); thresholds: a Thresholds or YAML path; every: observe
    every N-th step."""

    def __init__(self, trace: str = "neuraldbg-trace.jsonl", *, fail_on: str | None = None,
                 stop_on=None, thresholds=None, every: int = 1):
        self.observation = Observation(trace, fail_on, stop_on, thresholds, every, "lightning")

    @property
    def dbg(self):
        """The NeuralDbg of the last fit (`.transitions`, `.failures()`)."""
        return self.observation.dbg

    @property
    def failed(self) -> bool:
        return self.observation.failed

    def on_fit_start(self, trainer, pl_module) -> None:
        self.observation.start(pl_module)       # (each rank its own trace, as under torchrun)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
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

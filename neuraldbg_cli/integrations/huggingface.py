"""A Hugging Face Trainer callback: `Trainer(..., callbacks=[NeuralDbgCallback()])`.

Observes the model during `train()` (it is called as `model(**inputs)`: the keyword-only
input is observed), writes the trace, stops training when a `stop_on` state is detected,
and logs the likely hypotheses at the end through transformers' logger. Needs
`pip install neuraldbg[huggingface]`."""
from __future__ import annotations

from transformers import TrainerCallback
from transformers.utils import logging

from .observing import Observing, stopping_message

log = logging.get_logger("transformers.trainer.neuraldbg")


class NeuralDbgCallback(Observing, TrainerCallback):
    """Observes a Trainer.train(); its options are Observing's (trace, fail_on, stop_on, ...)."""

    framework = "transformers"

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.observation.start(model)

    def on_step_end(self, args, state, control, **kwargs):
        found = self.observation.should_stop()
        if found:
            log.warning(stopping_message(found))
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        self.observation.close(global_step=state.global_step)
        if state.is_world_process_zero:
            for line in self.observation.explained():
                log.info(line)

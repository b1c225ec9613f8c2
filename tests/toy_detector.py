"""A toy detector, entirely in this file: Linear layers whose output rms exceeds a limit are
"loud". Importing it adds the signal `toy` to the state registry and the detector to the
monitor's; nothing else in the package knows of it."""
from torch import nn

from neuraldbg_cli import states
from neuraldbg_cli.observe import detectors
from neuraldbg_cli.observe.detectors.base import NOTHING, OUTPUT_NORM, Detector

LIMIT = 3.0

TOY = states.register(states.Signal("toy", "quiet", (
    states.State("quiet", failure=False),
    states.State("loud", True, 0.5, "L", "red", "got loud", "Turn it down."),
)))


class LoudLinear(Detector):
    signal = TOY

    def needs(self, module, kind, leaf):
        return frozenset((OUTPUT_NORM,)) if isinstance(module, nn.Linear) else NOTHING

    def judge(self, x, history):
        return ("loud", {"limit": LIMIT}) if x.rms > LIMIT else ("quiet", {})


detectors.register(LoudLinear)

"""neuraldbg: finds where and why PyTorch training fails (dead, saturated, exploding, NaN)."""

from .stopping import TrainingStopped

__version__ = "0.1.0"
__all__ = ["NeuralDbg", "TrainingStopped", "__version__"]


def __getattr__(name):
    # Lazy, so that `neuraldbg explain` never imports torch.
    if name == "NeuralDbg":
        from .observe.api import NeuralDbg
        return NeuralDbg
    raise AttributeError(name)

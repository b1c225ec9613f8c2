"""The command line: `neuraldbg run`, `explain` and `thresholds`; options, files, exit codes."""
from .main import app, main, main_exit

__all__ = ["app", "main", "main_exit"]

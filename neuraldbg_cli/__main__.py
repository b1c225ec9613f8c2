"""`python -m neuraldbg_cli ...` is `neuraldbg ...`."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())

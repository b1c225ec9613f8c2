"""The one exception family the CLI turns into a one-line message and exit code 2, and the
check every file the CLI writes gets before any work starts."""
import os
from pathlib import Path


class InputError(Exception):
    """Bad usage or bad input: printed as one line, exit status 2, script not started."""

    exit_code = 2


def check_writable(path: str, what: str) -> None:
    """Fail before the work (before the script starts, under `run`) if the file `what`
    ("trace", "report", ...) cannot be created at `path`."""
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"cannot write {what} {path}: folder {folder} does not exist")
    if p.is_dir():
        raise InputError(f"cannot write {what} {path}: it is a folder")
    if not os.access(folder, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise InputError(f"cannot write {what} {path}: permission denied")


def check_folder(path: str, what: str) -> None:
    """Fail before the work if the folder `what` cannot be made or written at `path` (it is
    made when first needed)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(f"cannot write {what} {path}: it is a file")
    existing = next((q for q in (p, *p.parents) if q.exists()), Path("."))
    if not os.access(existing, os.W_OK):
        raise InputError(f"cannot write {what} {path}: permission denied")

"""What `run` and `explain` hand to CI systems after the fact: the JUnit file asked for, and
under GitHub Actions its annotations and step summary."""
from __future__ import annotations

import sys

from . import github, junit


def wanted(junit_path: str | None) -> bool:
    return junit_path is not None or github.active()


def publish(analysis, fail_on, junit_path: str | None, err=None) -> None:
    err = sys.stderr if err is None else err
    if junit_path is not None:
        junit.write(analysis, fail_on, junit_path)
    if github.active():
        github.publish(analysis, fail_on, err)

"""What a cause rule concludes about one failure."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """One rule's verdict on an origin: the cause, how strongly the trace supports it (0..1),
    a clause for the summary, the evidence lines and a concrete fix."""
    cause: str
    strength: float
    why: str
    evidence: tuple
    fix: str

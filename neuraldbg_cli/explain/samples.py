"""The samples to blame: a capture's pinpoint (the step's forward run again, each operation
checked) that finds a non-finite value born in a few rows of the batch says that the data,
not the learning rate or the model, started it."""
from __future__ import annotations

from ..inert import inert
from ..stopping import pinpointed
from .finding import Finding
from .runs import is_int


def blamed_samples(ep, ctx):
    """A non-finite failure at the step a capture pinpointed to a few rows of the batch."""
    capture = ctx.runs[ep.run].capture
    if ep.state != "nonfinite" or capture is None or capture.get("step") != ep.onset:
        return None
    pin = capture.get("pinpoint")
    rows = pin.get("rows") if isinstance(pin, dict) else None
    batch = pin.get("batch") if isinstance(pin, dict) else None
    if not isinstance(rows, list) or not rows or not is_int(batch) or len(rows) > batch // 2:
        return None
    blamed = capture.get("blamed_indices")
    blamed = blamed if isinstance(blamed, list) and all(is_int(i) for i in blamed) else None
    said = pinpointed(pin, blamed)
    which = f"dataset indices {', '.join(map(str, blamed))}" if blamed else \
        f"rows {', '.join(map(str, rows))} of the batch"
    return Finding("input_data", 0.92, f"{len(rows)} of {batch} samples of the batch carry it",
                   (inert(f"{said} (the step's forward run again, each operation checked)"),
                    inert(f"the captured step: {capture['path']}")),
                   inert(f"Repair or drop those samples ({which}); filter the data pipeline "
                         "for values the model cannot take (NaN/inf, or out of the domain of "
                         "the operation named), e.g. with torch.isfinite."))

"""`TrainingStopped`: what the script gets when a `--stop-on` failure is confirmed.

Torch-free, so that `neuraldbg_cli.TrainingStopped` can be caught without importing torch."""
from __future__ import annotations


class TrainingStopped(Exception):
    """Raised inside the training script, at the optimizer step where a counted failure in
    the `stop_on` states is confirmed, before that step's update is applied.

    An Exception, not a BaseException: the script's `finally` blocks run, DataLoader
    workers end, and a script may catch it to save its own state. Once raised, every later
    optimizer step raises it again, so a script that swallows it still applies no further
    update; `run` exits 3 with `run_end.status` `stopped` whatever the script does after.

    Attributes: state, signal, layer, step (the failure's onset, as in the trace); at: the
    step whose update was withheld; capture: the capture file written, or None."""

    def __init__(self, state: str, signal: str, layer: str, step: int, at: int | None = None,
                 capture: str | None = None):
        self.state, self.signal, self.layer, self.step = state, signal, layer, step
        self.at = step if at is None else at
        self.capture = capture
        since = f" (since step {step})" if self.at != step else ""
        where = f"; evidence in {capture}" if capture else ""
        super().__init__(f"neuraldbg stopped training at step {self.at}: {layer} {signal} "
                         f"{state}{since}{where}")

    def to_dict(self) -> dict:
        """What `run_end.stop` says of it."""
        return {"state": self.state, "signal": self.signal, "layer": self.layer,
                "step": self.step, "at": self.at, "capture": self.capture}


def _listed(items: list) -> str:
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def pinpointed(pin: dict | None, blamed: list | None = None) -> str | None:
    """One sentence from a capture's pinpoint: "the NaN is born in `log` inside `head`,
    rows 3 and 17, dataset indices 4512 and 4526"; None without a pinpoint."""
    if not isinstance(pin, dict):
        return None
    kind = pin.get("kind") or "non-finite value"
    if pin.get("born") == "input":
        where = "is already in the model's input"
    else:
        inside = f" inside `{pin['module']}`" if pin.get("module") else ""
        where = f"is born in `{pin.get('op')}`{inside}"
    rows = pin.get("rows")
    said = f"the {kind} {where}"
    if rows:
        said += f", row{'s' * (len(rows) > 1)} {_listed(rows)}"
    if blamed:
        said += f", dataset ind{'ices' if len(blamed) > 1 else 'ex'} {_listed(blamed)}"
    return said

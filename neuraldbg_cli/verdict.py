"""The verdict: which failure episodes count against a run, and which were only blips.

An *episode* is one layer's signal held in one failure state, from the step the trace dates
its onset to its next transition (or to the end of the run). The trace keeps every
transition as it happened; only episodes that *last* fail the run:

- a non-finite value counts at once (one NaN written into the weights ruins every later step);
- any other failure counts once it has held for `hold_steps` observed steps, or when the run
  ends while it still holds (it never recovered), or when its layer has fallen into it
  `recurring` times within `recurring_within` observed steps (a loss that keeps spiking, a
  layer that keeps dying; not a converged, noisy loss with a spike every thousand steps);
- a state named in `at_end` (a stalled loss: a slow start that learns later is no failure;
  units that are copies of one another until rounding sets them apart) counts only while
  it still holds when the run ends; so does a layer frozen while its
  optimizer's every learning rate is 0 (`rate_zero`: a warm-up from 0 changes nothing at
  first, a rate of 0 for good never does);
- an episode whose transition says `no_signal` (a loss that stays flat while the weights move
  at a healthy pace: targets the model cannot learn from) is a finding, never a failure.

A shorter episode is a *blip*: a warning, like `anomalous`. Every reader that says whether a
run failed (`run_end.failures`, the summary line, `--fail-on`, `--stop-on`, JUnit, GitHub
annotations, `dbg.failures()`, the pytest plugin, `explain`'s verdict) asks this module, so
they all count the same episodes. Torch-free: `explain` uses it on traces read elsewhere.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import states

AT_ONCE = frozenset(("nonfinite",))
KEPT = 8        # counted episodes kept per layer and signal; later ones are only counted


@dataclass(frozen=True)
class Rule:
    """hold_steps: observed steps an episode must hold to count; recurring: the entry into a
    state, by one layer and signal, from which each counts, the entries counted within
    `recurring_within` observed steps; at_end: states that count only when still held as
    the run ends; every: optimizer steps per observed step (`--every`)."""
    hold_steps: int = 10
    recurring: int = 5
    recurring_within: int = 500
    at_end: frozenset = frozenset(("stalled", "symmetric"))
    every: int = 1

    @classmethod
    def of(cls, verdict: dict | None, every=1) -> Rule:
        """From a trace's `run_start.thresholds.verdict` (or a Thresholds' `verdict`, as a
        dict); a trace that predates the verdict gets the defaults."""
        v = verdict if isinstance(verdict, dict) else {}

        def count(key):
            n = v.get(key)
            return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 \
                else getattr(cls, key)
        at_end = v.get("at_end")
        return cls(hold_steps=count("hold_steps"), recurring=count("recurring"),
                   recurring_within=count("recurring_within"),
                   at_end=frozenset(s for s in at_end if isinstance(s, str))
                   if isinstance(at_end, (list, tuple)) else cls.at_end,
                   every=every if isinstance(every, int) and every > 0 else 1)

    def counts(self, state: str, held: int, open_: bool, ended: bool, nth: int = 1,
               stats=None) -> bool:
        """Whether an episode of `state` that has held `held` optimizer steps (still `open_`,
        in a run that has `ended` or not; the `nth` time its layer and signal entered that
        state; `stats`: its transition's) counts against the run."""
        if isinstance(stats, dict) and stats.get("no_signal") is True:
            return False
        if state in AT_ONCE or open_ and ended:
            return True
        if state in self.at_end or isinstance(stats, dict) and stats.get("rate_zero") is True:
            return False
        return held >= self.hold_steps * self.every or nth >= self.recurring


@dataclass
class Held:
    """One failure episode: `steps` is how long it held (so far, if `open`)."""
    layer: str
    signal: str
    state: str
    step: int
    steps: int
    open: bool
    counted: bool
    transition: dict

    def to_dict(self) -> dict:
        return {"layer": self.layer, "signal": self.signal, "state": self.state,
                "step": self.step, "steps": self.steps}


class Ledger:
    """Failure episodes from transitions, fed in the order the monitor writes them (in step
    order within each layer and signal). Bounded: per layer and signal, the open episode, the
    first KEPT counted ones, and how many ended as blips."""

    def __init__(self, rule: Rule):
        self.rule = rule
        self._open: dict = {}               # (layer, signal) -> (transition, nth entry)
        self._closed: dict = {}             # (layer, signal) -> [Held] counted, at most KEPT
        self._entries: dict = {}            # (layer, signal, state) -> the last entries' steps
        self.extra = 0                      # counted episodes past KEPT
        self.blips = 0                      # closed episodes that did not count

    def add(self, t: dict) -> None:
        step, key = t["step"], (t["layer"], t["signal"])
        ended = self._open.pop(key, None)
        if ended is not None:
            h = self._held(*ended, held=max(0, step - ended[0]["step"]), open_=False, ended=False)
            if h.counted:
                kept = self._closed.setdefault(key, [])
                if len(kept) < KEPT:
                    kept.append(h)
                else:
                    self.extra += 1
            else:
                self.blips += 1
        known = states.state_of(t["signal"], t["to"])
        if known is not None and known.failure:
            # the entries into this state within the window, this one included (the last
            # `recurring` kept: bounded)
            rule, entry = self.rule, (*key, t["to"])
            since = step - rule.recurring_within * rule.every
            recent = [s for s in self._entries.get(entry, ()) if s > since] + [step]
            self._entries[entry] = recent = recent[-rule.recurring:]
            self._open[key] = (t, len(recent))

    def _held(self, t: dict, nth: int, held: int, open_: bool, ended: bool) -> Held:
        counted = self.rule.counts(t["to"], held, open_, ended, nth, t.get("stats"))
        return Held(t["layer"], t["signal"], t["to"], t["step"], held, open_, counted, t)

    def _still_open(self, steps: int, ended: bool) -> list:
        return [self._held(t, nth, max(0, steps - t["step"]), True, ended)
                for t, nth in self._open.values()]

    def episodes(self, steps: int, ended: bool) -> list:
        """Every episode kept (counted, or open), in onset order, as of a run that has taken
        `steps` optimizer steps (`ended`: and is over)."""
        out = [h for kept in self._closed.values() for h in kept] + self._still_open(steps, ended)
        return sorted(out, key=lambda h: (h.step, h.layer, h.signal))

    def counted(self, steps: int, ended: bool, wanted=None) -> list:
        """The episodes that count, in `wanted` states (default: every failure state)."""
        return [h for h in self.episodes(steps, ended)
                if h.counted and (wanted is None or h.state in wanted)]

    def blip_count(self, steps: int, ended: bool) -> int:
        """Episodes too short to count: ended, or (once the run is over) still open."""
        return self.blips + sum(not h.counted for h in self._still_open(steps, ended)) * ended

    def has_episodes(self) -> bool:
        """Some failure episode is open or was counted (a cheap test, at every step)."""
        return bool(self._open or self._closed)

    def total(self, steps: int, ended: bool) -> int:
        return len(self.counted(steps, ended)) + self.extra

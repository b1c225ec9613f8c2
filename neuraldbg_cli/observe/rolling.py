"""A bounded window of recent values and its median, known within bounds at little cost."""
from __future__ import annotations


class RollingMedian:
    """The last `window` values (a ring) and their median, known within bounds at little
    cost: this runs for every layer at every step.

    Sorting is kept for when it matters. `median()` sorts the window and keeps the sorted
    copy; once the window is full, each new value moves every rank of it by at most one, so
    after j more values the median lies between the copy's ranks h-j and h+j (`bounds`). A
    test that holds for every value between the bounds holds for the median; only when the
    bounds cannot decide is the window sorted again."""

    __slots__ = ("_ring", "_window", "_next", "_sorted", "_since", "size")

    def __init__(self, window: int):
        self._ring: list = []          # the values in arrival order, overwritten in a circle
        self._window = window
        self._next = 0                 # where the next value goes once the ring is full
        self._sorted = None            # the full window, sorted, `_since` values ago
        self._since = 0
        self.size = 0

    def append(self, value: float) -> None:
        ring = self._ring
        if self.size == self._window:
            i = self._next
            ring[i] = value
            self._next = (i + 1) % self._window
            self._since += 1
        else:                          # still filling: ranks move by more than one
            ring.append(value)
            self.size += 1
            self._sorted = None

    def median(self) -> float:
        s = self._sorted = sorted(self._ring)
        self._since = 0
        n = len(s)
        h = n >> 1
        return s[h] if n & 1 else (s[h - 1] + s[h]) * 0.5

    def bounds(self) -> tuple | None:
        """(low, high) between which the median surely lies, or None when unknown."""
        s, j, n = self._sorted, self._since, self.size
        if s is None or n != self._window:
            return None
        h = n >> 1
        low, high = h - j - 1 + (n & 1), h + j
        return (s[low], s[high]) if low >= 0 and high < n else None

    def near(self, value: float, distance: float) -> bool:
        """True when `value` is surely within `distance` of the median (a hair inside, for
        the rounding of these sums); False when telling takes the median itself."""
        # bounds(), inlined: this runs for every layer at every step
        s, j, n = self._sorted, self._since, self.size
        if s is None or n != self._window:
            return False
        h = n >> 1
        low, high = h - j - 1 + (n & 1), h + j
        if low < 0 or high >= n:
            return False
        d = distance * _HAIR
        return s[high] - d <= value <= s[low] + d


_HAIR = 1 - 1e-9

"""Debounced transitions: onset dating, first observation, non-finite at once, no flooding."""
from neuraldbg_cli.observe.tracker import SignalTracker


def feed(states, debounce=2):
    tr = SignalTracker(debounce)
    out = [tr.update(i, s, {"i": i}) for i, s in enumerate(states)]
    return [(t.step, t.previous, t.state) for t in out if t], tr


def test_first_healthy_observation_is_immediate():
    assert feed(["normal", "normal"])[0] == [(0, None, "normal")]


def test_unhealthy_from_step_zero_is_dated_at_zero():
    assert feed(["dead", "dead", "dead"])[0] == [(0, None, "dead")]


def test_onset_is_the_first_step_of_the_new_state():
    got, _ = feed(["normal"] * 5 + ["dead"] * 4)
    assert got == [(0, None, "normal"), (5, "normal", "dead")]


def test_nonfinite_is_confirmed_at_once():
    got, _ = feed(["normal", "normal", "nonfinite", "normal", "normal"])
    assert got == [(0, None, "normal"), (2, "normal", "nonfinite"), (3, "nonfinite", "normal")]


def test_flapping_layer_does_not_flood():
    got, _ = feed(["normal"] + ["dead", "normal"] * 50)
    assert got == [(0, None, "normal")]


def test_stats_come_from_the_onset_step():
    tr = SignalTracker(3)
    for i, s in enumerate(["normal", "dead", "dead", "dead"]):
        t = tr.update(i, s, {"i": i})
    assert t.step == 1 and t.stats == {"i": 1}


def test_flush_reports_a_pending_failure_as_unconfirmed():
    _, tr = feed(["normal", "normal", "dead"])
    t = tr.flush()
    assert (t.step, t.state, t.stats["unconfirmed"]) == (2, "dead", True)
    _, tr = feed(["normal", "normal"])
    assert tr.flush() is None


def test_steady_is_the_confirmed_state_only_while_nothing_is_pending():
    """The monitor skips update() for a step in the steady state: it must never hide a
    pending candidate or a change."""
    t = SignalTracker(2)
    assert t.steady is None                          # nothing seen: every state matters
    t.update(0, "normal", {})
    assert t.steady == "normal"
    t.update(1, "dead", {})
    assert t.steady is None                          # a candidate is pending
    t.update(2, "normal", {})                        # it did not hold
    assert t.steady == "normal"
    t.update(3, "dead", {})
    assert t.update(4, "dead", {}) is not None and t.steady == "dead"


def test_a_layer_that_keeps_falling_back_needs_ever_longer_healthy_stretches():
    """Hysteresis: the first recovery takes `debounce` healthy steps, the next `growth` times
    as many; a layer dying for 3 steps out of every 9 is told once, then stays dead."""
    tr = SignalTracker(2, growth=4)
    flapping = ["normal"] + (["dead"] * 3 + ["normal"] * 6) * 30
    out = [tr.update(i, s, {}) for i, s in enumerate(flapping)]
    got = [(t.step, t.state) for t in out if t]
    assert got == [(0, "normal"), (1, "dead"), (4, "normal"), (10, "dead")]
    # a lasting recovery is still told, dated at its first healthy step (the flapping ended
    # with 6 of them)
    after = [tr.update(len(flapping) + i, "normal", {}) for i in range(8)]
    assert [(t.step, t.state) for t in after if t] == [(len(flapping) - 6, "normal")]


def test_without_growth_every_recovery_takes_the_debounce():
    tr = SignalTracker(2, growth=1)
    flapping = ["normal"] + (["dead"] * 3 + ["normal"] * 6) * 5
    assert sum(1 for i, s in enumerate(flapping) if tr.update(i, s, {})) == 11


def test_recoveries_older_than_the_window_are_forgotten():
    """With a window, only the recoveries of its last steps lengthen the next: a layer dead
    for a step every 150 steps recovers from each, after at most 2 x 4^3 healthy steps."""
    tr = SignalTracker(2, growth=4, window=500)
    story = ["normal"] + (["dead"] * 2 + ["normal"] * 148) * 12
    got = [(t.step, t.state) for t in (tr.update(i, s, {}) for i, s in enumerate(story)) if t]
    assert [s for _, s in got] == ["normal"] + ["dead", "normal"] * 12
    assert [step for step, s in got if s == "normal"][1:] == [3 + 150 * k for k in range(12)]


def test_a_recovery_held_back_by_the_hysteresis_is_told_when_the_run_ends():
    tr = SignalTracker(2, growth=4)
    for i, s in enumerate(["normal", "dead", "dead", "normal", "normal", "dead", "dead"]
                          + ["normal"] * 5):
        tr.update(i, s, {})
    assert tr.state == "dead"               # (the second recovery takes 8 healthy steps)
    t = tr.flush(completed=True)
    assert (t.step, t.state, t.stats) == (7, "normal", {})
    assert tr.flush(completed=True) is None


def test_an_unconfirmed_failure_is_told_only_when_the_run_did_not_complete():
    for completed, told in ((True, None), (False, ("dead", True))):
        tr = SignalTracker(3)
        tr.update(0, "normal", {})
        tr.update(1, "dead", {})
        t = tr.flush(completed)
        assert (t and (t.state, t.stats["unconfirmed"])) == told

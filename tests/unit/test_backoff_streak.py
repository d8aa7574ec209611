"""The one backoff's running form: pauses that double with each failure in a row, capped, and start over."""

import random

from outbox_bridge.core.backoff import Backoff, Streak


def test_pauses_double_with_each_failure_up_to_the_cap_and_start_over_after_a_reset() -> None:
    streak = Streak(Backoff(0.1, 0.8, random.Random(5)))
    ceilings = [0.1, 0.2, 0.4, 0.8, 0.8]
    for ceiling in ceilings:
        assert 0.5 * ceiling <= streak.failed() <= ceiling
    streak.reset()
    assert streak.failed() <= 0.1


def test_at_cap_keeps_the_longest_pause_until_a_reset() -> None:
    streak = Streak(Backoff(0.001, 0.064, random.Random(3)))
    assert streak.at_cap() >= 0.5 * 0.064
    assert streak.failed() >= 0.5 * 0.064
    streak.reset()
    assert streak.failed() <= 0.001


def test_two_streaks_with_their_own_jitter_drift_apart() -> None:
    one, other = (
        Streak(Backoff(0.001, 0.064, random.Random(1))),
        Streak(Backoff(0.001, 0.064, random.Random(2))),
    )
    assert [one.failed() for _ in range(8)] != [other.failed() for _ in range(8)]

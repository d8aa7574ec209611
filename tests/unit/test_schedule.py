"""The start a request asks for (`jobstore.schedule`): when it is, what idempotency keeps of it, and which
starts are refused."""

from __future__ import annotations

import pytest

from outbox_bridge.jobstore.schedule import MAX_DELAY_SECONDS, Schedule, available_from

NOW = 1_700_000_000.0


def test_a_delay_counts_from_acceptance_and_a_time_is_itself() -> None:
    assert Schedule(delay_seconds=30).start(NOW) == NOW + 30
    assert Schedule(run_at=NOW + 5).start(NOW) == NOW + 5
    assert Schedule().start(NOW) is None


def test_a_start_is_a_delay_or_a_time_never_both() -> None:
    with pytest.raises(ValueError, match="not both"):
        Schedule(delay_seconds=1, run_at=NOW)


def test_idempotency_keeps_the_start_as_named_not_as_resolved() -> None:
    assert Schedule(delay_seconds=30).identity() == {"delay_seconds": 30.0}
    assert Schedule(delay_seconds=30).identity() == Schedule(delay_seconds=30.0).identity()
    assert Schedule(run_at=NOW + 30).identity() == {"run_at": NOW + 30}
    assert Schedule().identity() == {}


def test_a_past_start_is_accepted_and_due_at_once() -> None:
    assert Schedule(run_at=NOW - 3600).refusal(NOW) is None
    assert available_from(NOW - 3600, NOW) == NOW
    assert available_from(None, NOW) == NOW
    assert available_from(NOW + 1, NOW) == NOW + 1


def test_a_start_over_thirty_days_ahead_is_refused_and_thirty_days_is_not() -> None:
    assert Schedule(run_at=NOW + MAX_DELAY_SECONDS).refusal(NOW) is None
    refusal = Schedule(run_at=NOW + MAX_DELAY_SECONDS + 0.001).refusal(NOW)
    assert refusal is not None and "30 days" in refusal


def test_a_start_the_deadline_passes_first_is_refused() -> None:
    assert Schedule(delay_seconds=60).refusal(NOW, deadline_seconds=61) is None
    assert Schedule(delay_seconds=60).refusal(NOW, deadline_seconds=60) is not None


def test_a_start_over_thirty_days_in_the_past_is_refused_as_a_mistake() -> None:
    assert Schedule(run_at=NOW - MAX_DELAY_SECONDS).refusal(NOW) is None
    refusal = Schedule(run_at=NOW - MAX_DELAY_SECONDS - 1).refusal(NOW)
    assert refusal is not None and "in the past" in refusal

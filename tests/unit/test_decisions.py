"""The pure decisions: backoff, retry-or-dead, cancel-vs-complete, what a sweep does to an expired lease."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox_bridge.core.backoff import Jitter, compute_backoff
from outbox_bridge.jobstore.decisions import (
    STORAGE_FAULT,
    STORAGE_RETRY_BUDGET,
    STORAGE_RETRY_MAX_SECONDS,
    Decision,
    decide_completion,
    decide_expired_lease,
    decide_failure,
    storage_retry_in,
)
from outbox_bridge.jobstore.states import State


class FixedRandom(random.Random):
    """A generator whose every draw is `value`, to pin the jitter at its extremes."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def failure(**overrides: object) -> Decision:
    values: dict[str, object] = {
        "permanent": False,
        "attempts": 1,
        "max_attempts": 3,
        "cancel_requested": False,
        "deadline_passed": False,
        "backoff": 2.5,
        "code": "boom",
        "message": "it broke",
    }
    values.update(overrides)
    return decide_failure(**values)  # type: ignore[arg-type]


def expired(**overrides: object) -> Decision:
    values: dict[str, object] = {
        "external_started": False,
        "attempts": 1,
        "max_attempts": 3,
        "cancel_requested": False,
        "deadline_passed": False,
        "backoff": 2.5,
    }
    values.update(overrides)
    return decide_expired_lease(**values)  # type: ignore[arg-type]


# Backoff


def test_backoff_doubles_with_each_attempt_until_the_cap() -> None:
    top = FixedRandom(1.0)
    delays = [compute_backoff(n, base=1.0, cap=60.0, rng=top) for n in range(1, 9)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]


@given(attempts=st.integers(1, 30), seed=st.integers(0, 2**32), other_seed=st.integers(0, 2**32))
def test_backoff_never_shrinks_from_one_attempt_to_the_next_whatever_the_jitter(
    attempts: int, seed: int, other_seed: int
) -> None:
    this = compute_backoff(attempts, base=0.5, cap=1e9, rng=random.Random(seed))
    following = compute_backoff(attempts + 1, base=0.5, cap=1e9, rng=random.Random(other_seed))
    assert following >= this


@given(
    attempts=st.integers(1, 5000),
    base=st.floats(0.001, 100.0),
    cap=st.floats(0.0, 3600.0),
    jitter=st.floats(0.0, 1.0, exclude_max=True),
)
def test_backoff_stays_within_the_upper_half_of_its_capped_ceiling(
    attempts: int, base: float, cap: float, jitter: float
) -> None:
    delay = compute_backoff(attempts, base=base, cap=cap, rng=FixedRandom(jitter))
    ceiling = min(cap, base * 2.0 ** min(attempts - 1, 64))
    assert ceiling / 2 <= delay <= ceiling
    assert delay <= cap


def test_backoff_jitter_spreads_delays_over_the_upper_half() -> None:
    rng = random.Random(7)
    delays = [compute_backoff(3, base=1.0, cap=60.0, rng=rng) for _ in range(500)]
    assert min(delays) >= 2.0 and max(delays) <= 4.0
    assert max(delays) - min(delays) > 1.5
    assert len(set(delays)) > 400


@given(
    attempts=st.integers(1, 5000),
    base=st.floats(0.001, 100.0),
    cap=st.floats(0.0, 3600.0),
    jitter=st.floats(0.0, 1.0, exclude_max=True),
)
def test_full_jitter_backoff_is_anywhere_from_zero_to_its_capped_ceiling(
    attempts: int, base: float, cap: float, jitter: float
) -> None:
    delay = compute_backoff(attempts, base=base, cap=cap, rng=FixedRandom(jitter), jitter=Jitter.FULL)
    ceiling = min(cap, base * 2.0 ** min(attempts - 1, 64))
    assert delay == FixedRandom(jitter).uniform(0.0, ceiling)
    assert 0.0 <= delay <= ceiling


def test_backoff_of_a_huge_attempt_count_is_the_cap_not_an_overflow() -> None:
    assert compute_backoff(5000, base=1.0, cap=60.0, rng=FixedRandom(1.0)) == 60.0


@pytest.mark.parametrize(("attempts", "base"), [(0, 1.0), (-1, 1.0), (3, 0.0)])
def test_backoff_is_zero_before_any_attempt_or_without_a_base(attempts: int, base: float) -> None:
    assert compute_backoff(attempts, base=base, cap=60.0) == 0.0


# A failed attempt


def test_transient_failure_within_the_budget_is_retried_after_the_backoff() -> None:
    decision = failure(attempts=2, max_attempts=3, backoff=4.0)
    assert decision == Decision(State.QUEUED, "boom", "it broke", retry_in=4.0)


@pytest.mark.parametrize("attempts", [3, 4])
def test_transient_failure_at_the_attempt_budget_is_dead(attempts: int) -> None:
    decision = failure(attempts=attempts, max_attempts=3)
    assert decision.state is State.DEAD
    assert decision.error_code == "attempts_exhausted"
    assert decision.retry_in is None
    assert "it broke" in (decision.error_message or "")


def test_permanent_failure_is_failed_even_with_attempts_left() -> None:
    decision = failure(permanent=True, attempts=1, max_attempts=3)
    assert decision == Decision(State.FAILED, "boom", "it broke")


def test_permanent_failure_is_failed_not_dead_at_the_budget() -> None:
    assert failure(permanent=True, attempts=3, max_attempts=3).state is State.FAILED


@pytest.mark.parametrize(("attempts", "deadline_passed"), [(1, False), (3, False), (1, True)])
def test_a_waiting_cancel_wins_over_retry_and_over_dead(attempts: int, deadline_passed: bool) -> None:
    decision = failure(cancel_requested=True, attempts=attempts, deadline_passed=deadline_passed)
    assert decision.state is State.CANCELLED
    assert decision.error_code == "cancelled"
    assert decision.retry_in is None


def test_a_passed_deadline_is_dead_even_with_attempts_left() -> None:
    decision = failure(deadline_passed=True, attempts=1, max_attempts=3)
    assert decision.state is State.DEAD
    assert decision.error_code == "deadline_exceeded"


# A finished attempt


def test_completion_succeeds_without_a_cancel_request() -> None:
    assert decide_completion(cancel_requested=False) is State.SUCCEEDED


def test_completion_after_a_committed_cancel_request_is_cancelled() -> None:
    assert decide_completion(cancel_requested=True) is State.CANCELLED


# An expired lease


@pytest.mark.parametrize(
    ("attempts", "cancel_requested", "deadline_passed"),
    list(itertools.product([1, 3], [False, True], [False, True])),
)
def test_expired_lease_after_an_external_effect_started_is_unknown_whatever_else_holds(
    attempts: int, cancel_requested: bool, deadline_passed: bool
) -> None:
    decision = expired(
        external_started=True,
        attempts=attempts,
        cancel_requested=cancel_requested,
        deadline_passed=deadline_passed,
    )
    assert decision.state is State.UNKNOWN
    assert decision.error_code == "outcome_unknown"
    assert decision.retry_in is None


def test_expired_lease_without_an_external_effect_is_retried_after_the_backoff() -> None:
    decision = expired(attempts=1, max_attempts=3, backoff=3.0)
    assert decision.state is State.QUEUED
    assert decision.error_code == "lease_expired"
    assert decision.retry_in == 3.0


def test_expired_lease_at_the_attempt_budget_is_dead() -> None:
    decision = expired(attempts=3, max_attempts=3)
    assert (decision.state, decision.error_code) == (State.DEAD, "attempts_exhausted")


def test_expired_lease_past_the_deadline_is_dead() -> None:
    decision = expired(deadline_passed=True)
    assert (decision.state, decision.error_code) == (State.DEAD, "deadline_exceeded")


def test_expired_lease_with_a_cancel_request_is_cancelled() -> None:
    assert expired(cancel_requested=True).state is State.CANCELLED


def test_a_job_whose_worker_still_renews_but_whose_deadline_passed_is_told_as_a_deadline() -> None:
    decision = expired(deadline_passed=True, lease_ran_out=False)
    assert decision == Decision(State.DEAD, "deadline_exceeded", "the job was still running at its deadline")
    lost = expired(deadline_passed=True)
    assert (lost.error_code, lost.error_message) == (
        "deadline_exceeded",
        "the deadline passed; the last attempt: the worker stopped renewing its lease",
    )
    unknown = expired(deadline_passed=True, lease_ran_out=False, external_started=True)
    assert unknown.state is State.UNKNOWN and unknown.error_message.startswith("the job was still running")
    assert expired(deadline_passed=True, lease_ran_out=False, cancel_requested=True).state is State.CANCELLED


def test_a_storage_fault_is_refunded_and_retried_later_even_with_the_budget_spent() -> None:
    decided = failure(attempts=3, max_attempts=3, storage_faults=1, code=STORAGE_FAULT)
    assert decided == Decision(
        State.QUEUED, STORAGE_FAULT, "it broke", retry_in=storage_retry_in(1), refund=True
    )


def test_storage_faults_back_off_longer_each_time_up_to_a_bound() -> None:
    pauses = [storage_retry_in(n) for n in range(1, STORAGE_RETRY_BUDGET + 1)]
    assert pauses == sorted(pauses) and pauses[0] > 2.5 and pauses[-1] == STORAGE_RETRY_MAX_SECONDS


def test_the_storage_faults_own_budget_spent_the_job_is_dead() -> None:
    decided = failure(storage_faults=STORAGE_RETRY_BUDGET, code=STORAGE_FAULT)
    assert decided.state is State.DEAD and decided.error_code == STORAGE_FAULT and not decided.refund


@pytest.mark.parametrize(
    ("cancel", "deadline", "state"), [(True, False, State.CANCELLED), (False, True, State.DEAD)]
)
def test_a_cancel_or_a_deadline_still_ends_a_job_that_met_a_storage_fault(
    cancel: bool, deadline: bool, state: State
) -> None:
    decided = failure(storage_faults=1, cancel_requested=cancel, deadline_passed=deadline)
    assert decided.state is state and not decided.refund

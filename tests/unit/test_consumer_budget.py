"""The consumer's claim budget: short jobs let it claim ahead of its threads, long ones do not."""

from __future__ import annotations

from consumer.budget import AHEAD_SECONDS, MAX_AHEAD, ClaimBudget


def test_before_any_job_ran_a_consumer_claims_one_job_ahead_per_thread() -> None:
    assert ClaimBudget(4).limit() == 8


def test_short_jobs_let_a_consumer_claim_up_to_the_most_ahead() -> None:
    budget = ClaimBudget(4)
    for _ in range(50):
        budget.ran(0.0001)
    assert budget.limit() == 4 + MAX_AHEAD


def test_a_job_running_longer_than_the_allowance_stops_claiming_ahead() -> None:
    budget = ClaimBudget(4)
    for _ in range(50):
        budget.ran(0.0001)
    assert budget.limit(longest_running=AHEAD_SECONDS * 2) == 4


def test_long_recent_jobs_shrink_the_allowance_to_the_threads() -> None:
    budget = ClaimBudget(4)
    for _ in range(50):
        budget.ran(10.0)
    assert budget.limit() == 4


def test_prefetch_covers_two_rounds_of_the_largest_claim_limit() -> None:
    budget = ClaimBudget(4)
    assert budget.prefetch == 2 * (4 + MAX_AHEAD)

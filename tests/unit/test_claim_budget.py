"""Claim budget: a run of short jobs lets a consumer claim ahead of its threads; a long job stops it."""

from __future__ import annotations

from outbox_bridge.worker.budget import (
    AHEAD_PER_THREAD,
    AHEAD_SECONDS,
    MAX_AHEAD,
    SHORT_RUNS_TO_BURST,
    ClaimBudget,
    default_prefetch,
)


def short_jobs(budget: ClaimBudget, count: int = SHORT_RUNS_TO_BURST) -> ClaimBudget:
    for _ in range(count):
        budget.ran(0.0001)
    return budget


def test_before_jobs_have_run_a_consumer_claims_one_job_per_thread() -> None:
    budget = ClaimBudget(4)
    assert (budget.bursting(), budget.limit()) == (False, 4)


def test_too_few_short_jobs_in_a_row_do_not_start_claiming_ahead() -> None:
    budget = short_jobs(ClaimBudget(4), SHORT_RUNS_TO_BURST - 1)
    assert (budget.bursting(), budget.limit()) == (False, 4)


def test_a_run_of_short_jobs_lets_a_consumer_claim_up_to_the_most_ahead() -> None:
    budget = short_jobs(ClaimBudget(4, prefetch=4 + MAX_AHEAD), 50)
    assert (budget.bursting(), budget.limit()) == (True, 4 + MAX_AHEAD)


def test_a_job_running_longer_than_the_allowance_stops_claiming_ahead() -> None:
    budget = short_jobs(ClaimBudget(4), 50)
    assert (budget.bursting(AHEAD_SECONDS * 2), budget.limit(AHEAD_SECONDS * 2)) == (False, 4)


def test_one_long_job_starts_the_count_of_short_ones_again() -> None:
    budget = short_jobs(ClaimBudget(4), 50)
    budget.ran(1.0)
    assert not budget.bursting()
    assert short_jobs(budget).bursting()


def test_a_consumer_holds_its_threads_worth_plus_a_bounded_number_ahead() -> None:
    assert ClaimBudget(4).prefetch == default_prefetch(4) == 4 + min(MAX_AHEAD, 4 * AHEAD_PER_THREAD)
    assert ClaimBudget(64).prefetch == 64 + MAX_AHEAD


def test_a_set_prefetch_is_kept_but_never_below_the_threads() -> None:
    assert ClaimBudget(4, prefetch=10).prefetch == 10
    assert ClaimBudget(4, prefetch=2).prefetch == 4


def test_a_consumer_never_claims_more_than_it_is_sent() -> None:
    budget = short_jobs(ClaimBudget(4, prefetch=6), 50)
    assert (budget.bursting(), budget.limit()) == (True, 6)
    assert not short_jobs(ClaimBudget(4, prefetch=4), 50).bursting()

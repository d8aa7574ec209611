"""`outbox_bridge.testing` applies a kind's snooze, timeout and backoff as the workers do: a snoozed job is
queued again, due later, without spending an attempt (a failure past MAX_SNOOZES); an attempt past the kind's
`timeout_seconds` fails with `timeout` and is retried within the budget, for a function and a coroutine;
`ctx.remaining_seconds()` is the nearer of the deadline and the timeout; a retry waits the kind's backoff."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import outbox_bridge
from outbox_bridge import testing
from outbox_bridge.core import clock
from outbox_bridge.jobstore import db, queries
from outbox_bridge.jobstore.records import Job as StoredJob

pytestmark = pytest.mark.databases("sqlite")  # the helpers make a SQLite store of their own

inline_jobs = testing.inline_jobs


class Snoozing(BaseModel):
    times: int = 1  # snooze this many times, then succeed (-1: always)


@outbox_bridge.kind("policy_snoozing", payload=Snoozing)
def snoozing(ctx: outbox_bridge.JobContext, payload: Snoozing) -> dict[str, Any]:
    snoozed = (ctx.checkpoint or {}).get("snoozed", 0)
    if payload.times < 0 or snoozed < payload.times:
        ctx.save_checkpoint({"snoozed": snoozed + 1})
        raise outbox_bridge.Snooze(45)
    return {"attempts": ctx.attempts, "snoozed": snoozed}


class Nothing(BaseModel):
    pass


@outbox_bridge.kind("policy_slow", payload=Nothing, timeout_seconds=0.3, max_attempts=2)
def slow(ctx: outbox_bridge.JobContext, payload: Nothing) -> dict[str, Any]:
    until = time.monotonic() + 30
    while time.monotonic() < until:
        try:
            time.sleep(0.01)
        except Exception:  # what a kind's own error handling catches: not the timeout
            pass
    return {"slept": 30}


@outbox_bridge.kind("policy_slow_async", payload=Nothing, timeout_seconds=0.3, max_attempts=2)
async def slow_async(ctx: outbox_bridge.JobContext, payload: Nothing) -> dict[str, Any]:
    await asyncio.sleep(30)
    return {"slept": 30}


@outbox_bridge.kind("policy_remaining", payload=Nothing, timeout_seconds=5)
def remaining(ctx: outbox_bridge.JobContext, payload: Nothing) -> dict[str, Any]:
    return {"remaining": ctx.remaining_seconds()}


@outbox_bridge.kind("policy_own_backoff", payload=Nothing, backoff=(100.0, 100.0), max_attempts=2)
def own_backoff(ctx: outbox_bridge.JobContext, payload: Nothing) -> None:
    raise outbox_bridge.TransientError("flaky", "not now")


def stored(jobs: testing.InlineJobs, job_id: str) -> StoredJob:
    found = db.read(jobs.engine, queries.get_job, job_id)
    assert found is not None
    return found


def attempts(jobs: testing.InlineJobs, job_id: str) -> list[tuple[str, str | None]]:
    return [(a.outcome, a.error_code) for a in db.read(jobs.engine, queries.attempts_of, job_id)]


def test_a_snoozed_job_waits_queued_then_runs_without_having_spent_an_attempt(
    inline_jobs: testing.InlineJobs,
) -> None:
    job = inline_jobs.submit("policy_snoozing", {"times": 1})
    at = clock.now()
    snoozed = inline_jobs.run(job.id)
    assert (snoozed.state, snoozed.job.attempts) == ("queued", 0)
    assert (stored(inline_jobs, job.id).available_at, stored(inline_jobs, job.id).snoozes) == (at + 45, 1)

    done = inline_jobs.run_to_end(job.id)
    assert (done.state, done.attempts) == ("succeeded", 1)
    assert inline_jobs.result(job.id) == {"attempts": 1, "snoozed": 1}
    assert attempts(inline_jobs, job.id) == [("snoozed", None), ("succeeded", None)]


def test_a_job_that_keeps_snoozing_fails_past_max_snoozes(tmp_path: Path) -> None:
    with testing.InlineJobs(tmp_path, max_snoozes=2) as jobs:
        job = jobs.submit("policy_snoozing", {"times": -1})
        done = jobs.run_to_end(job.id)
        assert (done.state, done.attempts) == ("dead", 3)  # the budget of MAX_ATTEMPTS (3)
        too_often = "snoozed_too_often"
        assert attempts(jobs, job.id) == [
            ("snoozed", None),
            ("snoozed", None),
            ("retry", too_often),
            ("retry", too_often),
            ("dead", too_often),
        ]
        assert stored(jobs, job.id).snoozes == 2


@pytest.mark.parametrize("kind", ["policy_slow", "policy_slow_async"])
def test_an_attempt_past_its_kinds_timeout_fails_with_timeout_and_is_retried(
    inline_jobs: testing.InlineJobs, kind: str
) -> None:
    job = inline_jobs.submit(kind, {})
    first = inline_jobs.run(job.id)
    assert (first.state, first.job.attempts, first.job.error) == (
        "queued",
        1,
        {"code": "timeout", "message": "The attempt ran past its kind's timeout of 0.3 seconds."},
    )
    done = inline_jobs.run_to_end(job.id)
    assert (done.state, done.attempts) == ("dead", 2)
    assert attempts(inline_jobs, job.id) == [("retry", "timeout"), ("dead", "timeout")]


def test_remaining_seconds_is_the_nearer_of_the_deadline_and_the_timeout(
    inline_jobs: testing.InlineJobs,
) -> None:
    by_timeout = inline_jobs.submit("policy_remaining", {}, deadline_seconds=3600)
    by_deadline = inline_jobs.submit("policy_remaining", {}, deadline_seconds=2)
    inline_jobs.run_to_end(by_timeout.id)
    inline_jobs.run_to_end(by_deadline.id)
    assert 0 < inline_jobs.result(by_timeout.id)["remaining"] <= 5
    assert 0 < inline_jobs.result(by_deadline.id)["remaining"] <= 2


def test_a_retry_waits_the_kinds_own_backoff(inline_jobs: testing.InlineJobs) -> None:
    job = inline_jobs.submit("policy_own_backoff", {})
    at = clock.now()
    assert inline_jobs.run(job.id).state == "queued"
    assert at + 50 <= stored(inline_jobs, job.id).available_at <= at + 100

"""`outbox_bridge.testing`: a team tests its kinds inline, with no broker and no processes, and the store
applies the rules it applies to workers: results, permanent and transient errors and the budget, resuming
from a checkpoint, a cancel at a safe point, and `unknown` after an effect that may have happened."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import outbox_bridge
from outbox_bridge import testing

pytestmark = pytest.mark.databases("sqlite")  # the helpers make a SQLite store of their own

inline_jobs = testing.inline_jobs  # the fixture a team gets with `pytest_plugins = ["outbox_bridge.testing"]`


class Steps(BaseModel):
    fail_first: int = 0
    permanent: bool = False


@outbox_bridge.kind("helpers_steps", payload=Steps, resumes=True)
def steps(ctx: outbox_bridge.JobContext, payload: Steps) -> dict[str, Any]:
    done = (ctx.checkpoint or {}).get("done", 0)
    if payload.permanent:
        raise outbox_bridge.PermanentError("bad_input", "never works")
    ctx.save_checkpoint({"done": done + 1})
    if ctx.attempts <= payload.fail_first:
        raise outbox_bridge.TransientError("flaky", f"attempt {ctx.attempts} failed")
    return {"done": done + 1, "attempts": ctx.attempts}


@outbox_bridge.kind("helpers_email", payload=Steps)
def email(ctx: outbox_bridge.JobContext, payload: Steps) -> dict[str, Any]:
    ctx.check_cancel()
    ctx.mark_external_started()
    return {"sent": True}


def test_a_job_runs_to_its_result(inline_jobs: testing.InlineJobs) -> None:
    job = inline_jobs.submit("helpers_steps", {})
    assert inline_jobs.run_to_end(job.id).state == "succeeded"
    assert inline_jobs.result(job.id) == {"done": 1, "attempts": 1}


def test_a_permanent_error_fails_the_job_at_once(inline_jobs: testing.InlineJobs) -> None:
    job = inline_jobs.submit("helpers_steps", {"permanent": True})
    done = inline_jobs.run_to_end(job.id)
    assert (done.state, done.attempts, done.error) == (
        "failed",
        1,
        {"code": "bad_input", "message": "never works"},
    )
    with pytest.raises(LookupError):
        inline_jobs.result(job.id)


def test_transient_errors_are_retried_after_their_backoff_from_the_checkpoint(
    inline_jobs: testing.InlineJobs,
) -> None:
    job = inline_jobs.submit("helpers_steps", {"fail_first": 2})
    first = inline_jobs.run(job.id)
    assert first.state.value == "queued" and first.job.error == {
        "code": "flaky",
        "message": "attempt 1 failed",
    }
    with pytest.raises(AssertionError, match="cannot be claimed now"):
        inline_jobs.run(job.id)  # its backoff has not passed
    done = inline_jobs.run_to_end(job.id)
    assert done.state == "succeeded" and done.attempts == 3
    assert inline_jobs.result(job.id) == {"done": 3, "attempts": 3}  # each attempt went on from the last


def test_the_attempt_budget_spent_the_job_is_dead(inline_jobs: testing.InlineJobs) -> None:
    job = inline_jobs.submit("helpers_steps", {"fail_first": 99})
    done = inline_jobs.run_to_end(job.id)
    assert (done.state, done.attempts) == ("dead", 3)
    assert done.error is not None and done.error["code"] == "attempts_exhausted"


def test_a_cancel_at_a_safe_point_cancels_the_job(inline_jobs: testing.InlineJobs) -> None:
    job = inline_jobs.submit("helpers_email", {})
    assert inline_jobs.run(job.id, cancel_at_check=1).state.value == "cancelled"


def test_a_worker_lost_after_the_effect_started_leaves_the_job_unknown(
    inline_jobs: testing.InlineJobs,
) -> None:
    job = inline_jobs.submit("helpers_email", {})
    assert inline_jobs.run(job.id, crash_after_external_start=True).state.value == "unknown"


def test_submit_applies_the_rules_of_post_jobs(inline_jobs: testing.InlineJobs) -> None:
    with pytest.raises(outbox_bridge.InvalidJob):
        inline_jobs.submit("helpers_steps", {"fail_first": "two"})
    first = inline_jobs.submit("helpers_steps", {}, key="same")
    assert inline_jobs.submit("helpers_steps", {}, key="same").id == first.id


@outbox_bridge.kind("helpers_async_steps", payload=Steps, resumes=True)
async def async_steps(ctx: outbox_bridge.JobContext, payload: Steps) -> dict[str, Any]:
    done = (ctx.checkpoint or {}).get("done", 0)
    await asyncio.sleep(0)
    ctx.save_checkpoint({"done": done + 1})
    if ctx.attempts <= payload.fail_first:
        raise outbox_bridge.TransientError("flaky", f"attempt {ctx.attempts} failed")
    return {"done": done + 1, "attempts": ctx.attempts}


@outbox_bridge.kind("helpers_async_email", payload=Steps)
async def async_email(ctx: outbox_bridge.JobContext, payload: Steps) -> None:
    ctx.check_cancel()
    await asyncio.sleep(0)
    ctx.mark_external_started()


def test_an_async_kind_runs_to_its_result_as_a_worker_runs_it(inline_jobs: testing.InlineJobs) -> None:
    job = inline_jobs.submit("helpers_async_steps", {"fail_first": 1})
    assert inline_jobs.run(job.id).state.value == "queued"
    done = inline_jobs.run_to_end(job.id)
    assert (done.state, done.attempts) == ("succeeded", 2)
    assert inline_jobs.result(job.id) == {"done": 2, "attempts": 2}  # from the first attempt's checkpoint


def test_a_kind_that_returns_none_has_the_result_none(inline_jobs: testing.InlineJobs) -> None:
    job = inline_jobs.submit("helpers_async_email", {})
    assert inline_jobs.run_to_end(job.id).state == "succeeded"
    assert inline_jobs.result(job.id) is None


def test_an_async_kinds_cancel_and_lost_worker_are_those_of_a_function(
    inline_jobs: testing.InlineJobs,
) -> None:
    cancelled = inline_jobs.submit("helpers_async_email", {})
    assert inline_jobs.run(cancelled.id, cancel_at_check=1).state.value == "cancelled"
    lost = inline_jobs.submit("helpers_async_email", {})
    assert inline_jobs.run(lost.id, crash_after_external_start=True).state.value == "unknown"


def test_the_helpers_run_an_async_kind_from_an_async_test(inline_jobs: testing.InlineJobs) -> None:
    async def an_async_test() -> Any:
        job = inline_jobs.submit("helpers_async_steps", {})
        assert inline_jobs.run_to_end(job.id).state == "succeeded"
        return inline_jobs.result(job.id)

    assert asyncio.run(an_async_test()) == {"done": 1, "attempts": 1}

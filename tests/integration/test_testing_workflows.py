"""`outbox_bridge.testing` runs workflows inline: a batch's jobs one by one, then its callback, which exists
only once the last of them has ended and reads their outcomes in `ctx.batch`; a job after others waits until
they have succeeded, and is cancelled when one of them does not."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import outbox_bridge
from outbox_bridge import testing

pytestmark = pytest.mark.databases("sqlite")  # the helpers make a SQLite store of their own

inline_jobs = testing.inline_jobs  # the fixture a team gets with `pytest_plugins = ["outbox_bridge.testing"]`


class Image(BaseModel):
    n: int
    broken: bool = False


class Order(BaseModel):
    order_id: int


@outbox_bridge.kind("flow_resize", payload=Image)
def resize(ctx: outbox_bridge.JobContext, payload: Image) -> dict[str, Any]:
    if payload.broken:
        raise outbox_bridge.PermanentError("broken_image", f"image {payload.n} cannot be read")
    batch = ctx.batch
    return {"n": payload.n, "batch": batch, "order": None if batch is None else list(batch["jobs"])}


@outbox_bridge.kind("flow_order_ready", payload=Order)
def order_ready(ctx: outbox_bridge.JobContext, payload: Order) -> dict[str, Any]:
    batch = ctx.batch
    assert batch is not None
    return {"order_id": payload.order_id, "counts": batch["counts"], "jobs": len(batch["jobs"])}


def test_ten_jobs_fan_in_to_one_callback_that_reads_how_each_ended(inline_jobs: testing.InlineJobs) -> None:
    images = [{"kind": "flow_resize", "payload": {"n": n, "broken": n == 7}} for n in range(10)]
    batch = inline_jobs.submit_batch(
        images, callback={"kind": "flow_order_ready", "payload": {"order_id": 42}}
    )
    assert (batch.state, batch.counts, len(batch.jobs)) == ("running", {"queued": 10}, 10)

    for job_id in batch.jobs[:-1]:
        inline_jobs.run_to_end(job_id)
        assert inline_jobs.batch(batch.id).callback_job_id is None  # not before the last has ended
    # a member is no batch's callback
    assert inline_jobs.result(batch.jobs[0]) == {"n": 0, "batch": None, "order": None}

    inline_jobs.run_to_end(batch.jobs[-1])
    done = inline_jobs.batch(batch.id)
    assert (done.state, done.counts) == ("done", {"succeeded": 9, "failed": 1})
    assert done.callback_job_id is not None and done.done_at is not None
    callback = inline_jobs.job(done.callback_job_id)
    assert (callback.kind, callback.state, callback.callback_of) == ("flow_order_ready", "queued", batch.id)

    assert inline_jobs.run_to_end(done.callback_job_id).state == "succeeded"
    assert inline_jobs.result(done.callback_job_id) == {
        "order_id": 42,
        "counts": {"succeeded": 9, "failed": 1},
        "jobs": 10,
    }


def test_a_batch_takes_job_specs_and_a_callback_reads_the_members_in_order(
    inline_jobs: testing.InlineJobs,
) -> None:
    specs = [outbox_bridge.JobSpec("flow_resize", {"n": n}) for n in range(3)]
    batch = inline_jobs.submit_batch(specs, callback=outbox_bridge.JobSpec("flow_resize", {"n": 99}))
    assert (
        inline_jobs.submit_batch(specs, callback=outbox_bridge.JobSpec("flow_resize", {"n": 99}), key="k").id
        != batch.id
    )
    for job_id in batch.jobs:
        inline_jobs.run_to_end(job_id)
    callback_id = inline_jobs.batch(batch.id).callback_job_id
    assert callback_id is not None
    inline_jobs.run_to_end(callback_id)
    result = inline_jobs.result(callback_id)
    assert result["batch"] == {
        "id": batch.id,
        "counts": {"succeeded": 3},
        "jobs": dict.fromkeys(batch.jobs, "succeeded"),
    }
    assert result["order"] == batch.jobs  # ctx.batch's jobs in the batch's order


def test_a_job_after_another_waits_for_it_then_runs(inline_jobs: testing.InlineJobs) -> None:
    first = inline_jobs.submit("flow_resize", {"n": 1})
    then = inline_jobs.submit("flow_resize", {"n": 2}, after=[first.id])
    assert (then.state, then.waiting_for) == ("queued", [first.id])
    with pytest.raises(AssertionError, match=f"waits for {first.id}"):
        inline_jobs.run_to_end(then.id)

    inline_jobs.run_to_end(first.id)
    assert inline_jobs.job(then.id).waiting_for == []
    assert inline_jobs.run_to_end(then.id).state == "succeeded"


def test_a_job_after_one_that_failed_is_cancelled_unless_it_asked_to_run(
    inline_jobs: testing.InlineJobs,
) -> None:
    first = inline_jobs.submit("flow_resize", {"n": 1, "broken": True})
    cancelled = inline_jobs.submit("flow_resize", {"n": 2}, after=[first.id])
    runs = inline_jobs.submit("flow_resize", {"n": 3}, after=[first.id], on_dependency_failure="run")
    assert inline_jobs.run_to_end(first.id).state == "failed"
    ended = inline_jobs.job(cancelled.id)
    assert (ended.state, ended.error and ended.error["code"]) == ("cancelled", "dependency_failed")
    assert inline_jobs.run_to_end(runs.id).state == "succeeded"


def test_an_unknown_batch_is_a_key_error(inline_jobs: testing.InlineJobs) -> None:
    with pytest.raises(KeyError):
        inline_jobs.batch("no-such-batch")

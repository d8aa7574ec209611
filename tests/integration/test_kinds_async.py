"""`async def` kinds and kinds that return None, through the executor both worker modes run and a real
store: a coroutine runs under the same lease, cancel, checkpoint and deadline rules as a function, on an
event loop of its own thread made for its attempt, and None is the result `null`."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from typing import Any, Literal

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel
from sqlalchemy import Engine

import outbox_bridge
from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.clock import now
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, operator, queries
from outbox_bridge.jobstore.states import State
from outbox_bridge.worker.attempt import AttemptOutcome, StoreContext, run_attempt
from outbox_bridge.worker.commit import backoff_of, commit_outcomes
from outbox_bridge.worker.lease import LeasedJob
from tests.support.kinds import claim, run
from tests.support.store import claimed, job_row, new_job


class Steps(BaseModel):
    steps: int = 2


class Raises(BaseModel):
    mode: Literal["permanent", "transient", "exception", "cancelled"]


class Empty(BaseModel):
    pass


@outbox_bridge.kind("async_steps", payload=Steps)
async def async_steps(ctx: outbox_bridge.JobContext, payload: Steps) -> dict[str, Any]:
    done = 0
    for _ in range(payload.steps):
        await asyncio.sleep(0)
        done += 1
        ctx.save_checkpoint({"done": done})
        ctx.check_cancel()
    ctx.mark_external_started()
    return {"done": done, "remaining": ctx.remaining_seconds(), "thread": threading.current_thread().name}


@outbox_bridge.kind("async_returns_none", payload=Empty)
async def async_returns_none(ctx: outbox_bridge.JobContext, payload: Empty) -> None:
    await asyncio.sleep(0)


@outbox_bridge.kind("sync_returns_none", payload=Empty)
def sync_returns_none(ctx: outbox_bridge.JobContext, payload: Empty) -> None:
    ctx.check_cancel()


@outbox_bridge.kind("async_raises", payload=Raises)
async def async_raises(ctx: outbox_bridge.JobContext, payload: Raises) -> dict[str, Any]:
    await asyncio.sleep(0)
    if payload.mode == "permanent":
        raise outbox_bridge.PermanentError("bad_input", "never works")
    if payload.mode == "transient":
        raise outbox_bridge.TransientError("busy", "try later")
    if payload.mode == "cancelled":
        raise asyncio.CancelledError()
    raise ValueError("a bug in the kind")


@outbox_bridge.kind("async_returns_a_list", payload=Empty)
async def async_returns_a_list(ctx: outbox_bridge.JobContext, payload: Empty) -> Any:
    return [1, 2]


LEFT_BEHIND: list[str] = []


@outbox_bridge.kind("async_leaves_a_task", payload=Empty)
async def async_leaves_a_task(ctx: outbox_bridge.JobContext, payload: Empty) -> dict[str, Any]:
    async def forgotten() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            LEFT_BEHIND.append("cancelled with its attempt")

    asyncio.get_running_loop().create_task(forgotten())
    await asyncio.sleep(0)  # it has started
    return {}


BLOCKED = threading.Event()
RELEASE = threading.Event()


@outbox_bridge.kind("async_blocks", payload=Empty)
async def async_blocks(ctx: outbox_bridge.JobContext, payload: Empty) -> dict[str, Any]:
    BLOCKED.set()
    released = RELEASE.wait(timeout=20)  # blocks its loop, as a synchronous library call would
    return {"released": released}


@pytest.fixture
def settings(settings_factory: Callable[..., Settings]) -> Settings:
    """Every loaded kind accepted (the kinds above among them)."""
    return settings_factory(allowed_kinds=None)


def submit(engine: Engine, kind: str, payload: dict[str, Any] | None = None, **fields: Any) -> str:
    return new_job(engine, str(uuid.uuid4()), kind=kind, payload=payload or {}, **fields)


def attempt_with(
    engine: Engine, settings: Settings, job_id: str, **flags: bool
) -> tuple[AttemptOutcome, State | None]:
    """Run one attempt with the lease keeper's flags as given (`cancel_requested`, `lost`), and commit it."""
    taken = claim(engine, settings, job_id)
    outcome = run_attempt(StoreContext(engine, settings, taken, LeasedJob(taken, **flags)))
    [state] = db.transact(engine, commit_outcomes, [(taken, outcome)], now(), backoff_of(settings))
    return outcome, state


def test_an_async_kind_runs_to_its_result_with_its_checkpoints_deadline_and_effect_mark(
    engine: Engine, settings: Settings
) -> None:
    job_id = submit(engine, "async_steps", {"steps": 3}, deadline=600)
    assert run(engine, settings, claim(engine, settings, job_id)) is State.SUCCEEDED

    job = job_row(engine, job_id)
    assert (job.checkpoint, job.error_code) == ({"done": 3}, None)
    [attempt] = db.read(engine, queries.attempts_of, job_id)
    assert attempt.external_started_at is not None
    output = db.read(engine, queries.committed_result, job_id).output
    assert output["done"] == 3 and 0 < output["remaining"] <= 600
    assert output["thread"] == threading.current_thread().name  # on the thread running the attempt


@pytest.mark.parametrize("kind", ["sync_returns_none", "async_returns_none"])
def test_a_kind_that_returns_none_succeeds_and_its_result_is_json_null(
    engine: Engine, settings: Settings, kind: str
) -> None:
    job_id = submit(engine, kind, tenant="acme")
    assert run(engine, settings, claim(engine, settings, job_id)) is State.SUCCEEDED
    job = job_row(engine, job_id)
    assert (job.attempts, job.error_code, job.result_attempt_id is not None) == (1, None, True)

    token = issue_token(settings.auth_secret, tenant="acme", user="ann")
    with TestClient(create_app(settings)) as client:
        answer = client.get(f"/jobs/{job_id}/result", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert answer.content == b"null"


def test_an_async_kind_stops_at_a_cancel_request_it_checks(engine: Engine, settings: Settings) -> None:
    job_id = submit(engine, "async_steps")
    taken = claim(engine, settings, job_id)
    assert db.transact(engine, operator.request_cancel, job_id, now()) is operator.CancelOutcome.REQUESTED
    outcome = run_attempt(StoreContext(engine, settings, taken, LeasedJob(taken, cancel_requested=True)))
    [state] = db.transact(engine, commit_outcomes, [(taken, outcome)], now(), backoff_of(settings))

    assert outcome.cancelled and state is State.CANCELLED
    assert job_row(engine, job_id).checkpoint == {"done": 1}  # it stopped at its first check


def test_an_async_kind_fenced_out_by_another_worker_writes_nothing(
    engine: Engine, settings: Settings
) -> None:
    job_id = submit(engine, "async_steps")
    taken = claim(engine, settings, job_id)
    again = claimed(engine, job_id, "worker-2", now=now() + settings.lease_seconds + 1)  # its lease ran out
    outcome = run_attempt(StoreContext(engine, settings, taken, LeasedJob(taken)))
    [state] = db.transact(engine, commit_outcomes, [(taken, outcome)], now(), backoff_of(settings))

    assert outcome.lease_lost and state is None  # its first checkpoint was refused, and it stopped there
    job = job_row(engine, job_id)
    assert (job.state, job.epoch, job.checkpoint, job.result_attempt_id) == (
        State.RUNNING,
        again.epoch,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("mode", "state", "code"),
    [
        ("permanent", State.FAILED, "bad_input"),
        ("transient", State.QUEUED, "busy"),
        ("exception", State.QUEUED, "handler_error"),
        (
            "cancelled",
            State.QUEUED,
            "handler_error",
        ),  # the coroutine's own CancelledError is a bug of its own
    ],
)
def test_an_async_kinds_errors_end_its_attempt_as_a_functions_do(
    engine: Engine, settings: Settings, mode: str, state: State, code: str
) -> None:
    job_id = submit(engine, "async_raises", {"mode": mode})
    assert attempt_with(engine, settings, job_id)[1] is state
    assert job_row(engine, job_id).error_code == code


def test_a_kind_that_returns_what_is_not_an_object_fails_at_once(engine: Engine, settings: Settings) -> None:
    job_id = submit(engine, "async_returns_a_list")
    assert attempt_with(engine, settings, job_id)[1] is State.FAILED
    job = job_row(engine, job_id)
    assert (job.error_code, job.error_message) == (
        "invalid_result",
        "The kind returned list; a kind returns a JSON object or None.",
    )


def test_what_an_async_attempt_leaves_running_is_cancelled_when_it_ends(
    engine: Engine, settings: Settings
) -> None:
    LEFT_BEHIND.clear()
    job_id = submit(engine, "async_leaves_a_task")
    assert attempt_with(engine, settings, job_id)[1] is State.SUCCEEDED
    assert LEFT_BEHIND == ["cancelled with its attempt"]


def test_an_async_kind_that_blocks_holds_only_its_own_thread(engine: Engine, settings: Settings) -> None:
    BLOCKED.clear()
    RELEASE.clear()
    blocking = submit(engine, "async_blocks")
    states: list[State | None] = []
    other = threading.Thread(
        target=lambda: states.append(run(engine, settings, claim(engine, settings, blocking)))
    )
    other.start()
    try:
        assert BLOCKED.wait(timeout=20)
        # Another thread's coroutine runs to its end while the first one blocks its loop.
        quick = submit(engine, "async_steps")
        assert run(engine, settings, claim(engine, settings, quick)) is State.SUCCEEDED
        assert job_row(engine, blocking).state is State.RUNNING
    finally:
        RELEASE.set()
        other.join(timeout=20)
    assert states == [State.SUCCEEDED]
    assert db.read(engine, queries.committed_result, blocking).output == {"released": True}

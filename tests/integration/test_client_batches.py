"""`Client` and `AsyncClient` against the real api app: a job after others (`after`, `waiting_for`), a batch
submitted and read back (`submit_batch`, `get_batch`), its callback's `callback_of`, and the api's refusals
raised as the client's errors."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

import outbox_bridge
from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from tests.integration.test_api_concurrency_key import _through
from tests.support.batches import fail, succeed

NOOP = {"kind": "noop", "payload": {}}


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings), follow_redirects=False) as test_client:
        yield test_client


@pytest.fixture
def api(client: TestClient, settings: Settings) -> Iterator[outbox_bridge.Client]:
    token = issue_token(settings.auth_secret, tenant="acme", user="alice")
    with outbox_bridge.Client("http://api", token=token, transport=_through(client)) as made:
        yield made


def test_a_job_after_another_lists_what_it_waits_for_until_that_one_succeeds(
    api: outbox_bridge.Client, engine: Engine
) -> None:
    first = api.submit("noop", {}, key="first")
    then = api.submit("noop", {}, key="then", after=[first.id])
    runs = api.submit("noop", {}, key="runs", after=(first.id,), on_dependency_failure="run")
    assert (then.state, then.waiting_for, then.callback_of) == ("queued", [first.id], None)
    assert api.get(then.id) == then and runs.waiting_for == [first.id]
    assert api.submit("noop", {}, key="then", after=[first.id]) == then
    with pytest.raises(outbox_bridge.Conflict):
        api.submit("noop", {}, key="then", after=[first.id], on_dependency_failure="run")
    succeed(engine, first.id)
    assert api.get(then.id).waiting_for == [] and api.get(first.id).waiting_for == []


def test_an_after_naming_no_job_of_the_tenant_is_a_bad_request(
    api: outbox_bridge.Client, engine: Engine
) -> None:
    first = api.submit("noop", {}, key="first")
    with pytest.raises(outbox_bridge.BadRequest) as refused:
        api.submit("noop", {}, key="then", after=[first.id, "no-such-job"])
    assert "no-such-job" in refused.value.detail
    with pytest.raises(TypeError):
        api.submit("noop", {}, key="then", after=first.id)  # type: ignore[arg-type]


def test_a_batch_is_submitted_read_back_and_done_with_its_callback(
    api: outbox_bridge.Client, engine: Engine, clock: FakeClock
) -> None:
    batch = api.submit_batch(
        [NOOP, {"kind": "noop", "payload": {}, "priority": "high"}, NOOP],
        callback={"kind": "noop", "payload": {}, "deadline_seconds": 600},
        key="order-7",
    )
    assert (batch.state, batch.counts, batch.callback_job_id, batch.done) == (
        "running",
        {"queued": 3},
        None,
        False,
    )
    assert api.get_batch(batch.id) == batch
    with pytest.raises(outbox_bridge.Conflict):
        api.submit_batch([NOOP, NOOP, NOOP], callback={**NOOP, "deadline_seconds": 600}, key="order-7")
    assert api.submit_batch(
        [NOOP, {"kind": "noop", "payload": {}, "priority": "high"}, NOOP],
        callback={"kind": "noop", "payload": {}, "deadline_seconds": 600},
        key="order-7",
    ) == batch  # fmt: skip
    assert api.get(batch.jobs[1]).priority == "high"

    first, second, last = batch.jobs
    succeed(engine, first)
    fail(engine, second)
    assert api.get_batch(batch.id).callback_job_id is None
    clock.advance(1)
    succeed(engine, last)
    done = api.get_batch(batch.id)
    assert (done.state, done.done, done.counts) == ("done", True, {"succeeded": 2, "failed": 1})
    assert done.done_at is not None and done.callback_job_id is not None
    callback = api.get(done.callback_job_id)
    assert (callback.callback_of, callback.state, callback.deadline_at is not None) == (
        batch.id,
        "queued",
        True,
    )


def test_a_batch_the_api_refuses_raises_the_clients_error(api: outbox_bridge.Client) -> None:
    with pytest.raises(outbox_bridge.BadRequest) as refused:
        api.submit_batch([NOOP, {"kind": "nope", "payload": {}}])
    assert "jobs[1]" in refused.value.detail
    with pytest.raises(outbox_bridge.BadRequest):
        api.submit_batch([NOOP], callback={**NOOP, "delay_seconds": 5})
    with pytest.raises(outbox_bridge.BadRequest):
        api.submit_batch([])
    with pytest.raises(outbox_bridge.NotFound):
        api.get_batch("no-such-batch")
    api.submit_batch([NOOP], key="k")
    with pytest.raises(outbox_bridge.Conflict):
        api.submit_batch([NOOP, NOOP], key="k")
    with pytest.raises(TypeError):
        api.submit_batch(["noop"])  # type: ignore[list-item]


def test_another_tenants_batch_is_not_found(
    client: TestClient, api: outbox_bridge.Client, settings: Settings
) -> None:
    batch = api.submit_batch([NOOP])
    theirs = issue_token(settings.auth_secret, tenant="other", user="bob")
    with outbox_bridge.Client("http://api", token=theirs, transport=_through(client)) as other:
        with pytest.raises(outbox_bridge.NotFound):
            other.get_batch(batch.id)
        with pytest.raises(outbox_bridge.BadRequest):
            other.submit("noop", {}, after=[batch.jobs[0]])


def test_the_async_client_submits_and_reads_a_batch_and_a_job_after_others(
    client: TestClient, settings: Settings
) -> None:
    token = issue_token(settings.auth_secret, tenant="acme", user="alice")

    async def use() -> tuple[outbox_bridge.Batch, outbox_bridge.Batch, outbox_bridge.Job]:
        async with outbox_bridge.AsyncClient("http://api", token=token, transport=_through(client)) as api:
            batch = await api.submit_batch([NOOP, NOOP], callback=NOOP)
            then = await api.submit("noop", {}, after=batch.jobs, on_dependency_failure="run")
            return batch, await api.get_batch(batch.id), then

    batch, read, then = asyncio.run(use())
    assert read == batch and len(batch.jobs) == 2 and then.waiting_for == sorted(batch.jobs)

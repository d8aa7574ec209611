"""`outbox_bridge.enqueue_batch` in the caller's transaction: the batch and its jobs commit with the caller's
rows or not at all; the same batch again is the batch it made, another under its key a conflict; every job
is checked as `enqueue` checks one, and one refusal writes nothing. Once the last member has ended, the
callback job exists and its kind reads the batch's outcomes in `ctx.batch` (None for any other job)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy import Engine, func, select

import outbox_bridge
from outbox_bridge import enqueuing
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.schema import batches
from outbox_bridge.jobstore.states import State
from tests.integration import test_enqueue
from tests.integration.test_enqueue import counts, orders
from tests.support.batches import fail, succeed
from tests.support.kinds import claim, committed_output, run
from tests.support.store import job_row

app_engine = test_enqueue.app_engine  # the application's own engine, with a business table

SHOP = {"tenant": "shop", "owner": "checkout"}


@pytest.fixture(autouse=True)
def _deployment_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A deployment that names the kinds these tests enqueue (enqueue reads its settings once)."""
    for name in ("OUTBOX_BRIDGE_DEV", "MAX_ATTEMPTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ALLOWED_KINDS", "export,batch_tally")
    monkeypatch.chdir(Path(__file__).parent)  # no .env here
    enqueuing._settings.cache_clear()
    yield
    enqueuing._settings.cache_clear()


class Tally(BaseModel):
    note: str = ""


@outbox_bridge.kind("batch_tally", payload=Tally)
def tally(ctx: outbox_bridge.JobContext, payload: Tally) -> dict[str, Any]:
    return {"batch": ctx.batch}


@pytest.fixture
def settings(settings_factory: Any) -> Settings:
    """The worker's settings: the kinds these tests run accepted."""
    made: Settings = settings_factory(allowed_kinds=("export", "batch_tally"))
    return made


def exports(count: int) -> list[outbox_bridge.JobSpec]:
    return [outbox_bridge.JobSpec("export", {"rows": i, "chunk": 5}) for i in range(count)]


def batch_rows(engine: Engine) -> int:
    return db.read(engine, lambda conn: conn.execute(select(func.count()).select_from(batches)).scalar_one())


def enqueue_batch(
    app_engine: Engine, jobs: list[outbox_bridge.JobSpec], **options: Any
) -> outbox_bridge.Batch:
    with app_engine.begin() as conn:
        return outbox_bridge.enqueue_batch(conn, jobs, **{"key": "order-7", **SHOP, **options})


def test_a_batch_commits_with_the_callers_rows_or_not_at_all(
    app_engine: Engine, engine: Engine, clock: FakeClock
) -> None:
    callback = outbox_bridge.JobSpec("batch_tally", {"note": "done"})
    with app_engine.connect() as conn, conn.begin() as transaction:
        conn.execute(orders.insert().values(item="book"))
        outbox_bridge.enqueue_batch(conn, exports(3), callback=callback, key="order-7", **SHOP)
        transaction.rollback()
    assert counts(app_engine) == (0, 0, 0) and batch_rows(engine) == 0

    with app_engine.begin() as conn:
        conn.execute(orders.insert().values(item="book"))
        batch = outbox_bridge.enqueue_batch(conn, exports(3), callback=callback, key="order-7", **SHOP)
    assert counts(app_engine) == (1, 3, 3) and batch_rows(engine) == 1
    assert (batch.state, batch.done, batch.counts, batch.callback_job_id, batch.done_at) == (
        "running",
        False,
        {"queued": 3},
        None,
        None,
    )
    assert batch.created_at.timestamp() == pytest.approx(clock.now(), abs=0.001)
    members = [job_row(engine, job_id) for job_id in batch.jobs]
    assert [m.payload["rows"] for m in members] == [0, 1, 2]
    assert [m.operation_key for m in members] == [f"batch:{batch.id}:{i}" for i in range(3)]
    assert {(m.tenant, m.owner) for m in members} == {("shop", "checkout")}


def test_the_same_batch_again_is_the_batch_it_made_and_another_is_a_conflict(app_engine: Engine) -> None:
    made = enqueue_batch(app_engine, exports(2))
    assert enqueue_batch(app_engine, exports(2)) == made
    for other in (exports(3), exports(2)[::-1]):
        with pytest.raises(outbox_bridge.Conflict) as conflict:
            enqueue_batch(app_engine, other)
        assert conflict.value.problem["batch_url"] == f"/batches/{made.id}"
    with pytest.raises(outbox_bridge.Conflict):
        enqueue_batch(app_engine, exports(2), callback=outbox_bridge.JobSpec("batch_tally", {}))
    assert counts(app_engine) == (0, 2, 2)


@pytest.mark.parametrize(
    ("jobs", "options", "said"),
    [
        ([], {}, "1 to 1000 jobs, not 0"),
        (exports(1001), {}, "1 to 1000 jobs, not 1001"),
        ([*exports(2), outbox_bridge.JobSpec("export", {"rows": "many"})], {}, "jobs[2]: "),
        ([*exports(1), outbox_bridge.JobSpec("nope", {})], {}, "jobs[1]: "),
        ([outbox_bridge.JobSpec("export", {"rows": 1, "chunk": 1}, key="mine")], {}, "jobs[0]: "),
        ([*exports(1), {"kind": "export"}], {}, "jobs[1]: a job to enqueue is an outbox_bridge.JobSpec"),
        (exports(1), {"key": ""}, "the batch's key must be"),
        (exports(1), {"callback": outbox_bridge.JobSpec("batch_tally", {}, delay_seconds=5)}, "callback: "),
        (exports(1), {"callback": outbox_bridge.JobSpec("batch_tally", {}, after=["x"])}, "callback: "),
        (exports(1), {"callback": outbox_bridge.JobSpec("batch_tally", {}, key="k")}, "callback: "),
        (exports(1), {"callback": outbox_bridge.JobSpec("batch_tally", {"note": 7})}, "callback: "),
    ],
)
def test_a_job_that_does_not_pass_the_rules_refuses_the_batch_and_writes_nothing(
    app_engine: Engine, engine: Engine, jobs: list[Any], options: dict[str, Any], said: str
) -> None:
    with pytest.raises(outbox_bridge.InvalidJob) as refused:
        enqueue_batch(app_engine, jobs, **options)
    assert said in str(refused.value)
    assert counts(app_engine) == (0, 0, 0) and batch_rows(engine) == 0


def test_a_member_after_an_unknown_job_refuses_the_batch_naming_it(
    app_engine: Engine, engine: Engine
) -> None:
    with app_engine.begin() as conn:
        first = outbox_bridge.enqueue(conn, "export", {"rows": 1, "chunk": 1}, key="first", **SHOP)
    jobs = [
        outbox_bridge.JobSpec("export", {"rows": 1, "chunk": 1}, after=[first.id]),
        outbox_bridge.JobSpec("export", {"rows": 2, "chunk": 1}, after=[first.id, "no-such-job"]),
    ]
    with pytest.raises(outbox_bridge.UnknownDependencies) as refused:
        enqueue_batch(app_engine, jobs)
    assert str(refused.value).startswith("jobs[1]: ") and refused.value.ids == ["no-such-job"]
    assert counts(app_engine) == (0, 1, 1) and batch_rows(engine) == 0

    batch = enqueue_batch(app_engine, jobs[:1])
    assert job_row(engine, batch.jobs[0]).state is State.QUEUED


def test_the_callback_exists_once_the_last_member_ended_and_reads_the_batch(
    app_engine: Engine, engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    callback = outbox_bridge.JobSpec("batch_tally", {"note": "done"}, priority="high")
    batch = enqueue_batch(app_engine, exports(3), callback=callback)
    first, second, last = batch.jobs
    succeed(engine, first)
    fail(engine, second)
    assert callback_of(engine, batch.id) is None
    clock.advance(1)
    succeed(engine, last)
    callback_id = callback_of(engine, batch.id)
    assert callback_id is not None
    stored = job_row(engine, callback_id)
    assert (stored.kind, stored.state, stored.operation_key) == (
        "batch_tally",
        State.QUEUED,
        f"batch:{batch.id}:callback",
    )

    assert run(engine, settings, claim(engine, settings, callback_id)) is State.SUCCEEDED
    assert committed_output(engine, callback_id) == {
        "batch": {
            "id": batch.id,
            "counts": {"succeeded": 2, "failed": 1},
            "jobs": {first: "succeeded", second: "failed", last: "succeeded"},
        }
    }


def test_a_job_that_is_no_batchs_callback_reads_none(
    app_engine: Engine, engine: Engine, settings: Settings
) -> None:
    with app_engine.begin() as conn:
        plain = outbox_bridge.enqueue(conn, "batch_tally", {}, key="plain", **SHOP)
        # a key of a callback's form is the store's own: refused
        with pytest.raises(outbox_bridge.InvalidJob, match="batch:"):
            outbox_bridge.enqueue(conn, "batch_tally", {}, key="batch:x:callback", **SHOP)
    batch = enqueue_batch(app_engine, [outbox_bridge.JobSpec("batch_tally", {})])
    for job_id in (plain.id, batch.jobs[0]):
        assert run(engine, settings, claim(engine, settings, job_id)) is State.SUCCEEDED
        assert committed_output(engine, job_id) == {"batch": None}


def callback_of(engine: Engine, batch_id: str) -> str | None:
    query = select(batches.c.callback_job_id).where(batches.c.id == batch_id)
    return db.read(engine, lambda conn: conn.execute(query).scalar_one())


def test_a_batch_whose_jobs_all_ended_at_its_accept_is_done_with_its_callback_at_once(
    app_engine: Engine, engine: Engine
) -> None:
    with app_engine.begin() as conn:
        first = outbox_bridge.enqueue(conn, "export", {"rows": 1, "chunk": 1}, key="first", **SHOP)
    fail(engine, first.id)
    jobs = [outbox_bridge.JobSpec("export", {"rows": 2, "chunk": 1}, after=[first.id])]
    batch = enqueue_batch(app_engine, jobs, callback=outbox_bridge.JobSpec("batch_tally", {}))
    assert (batch.state, batch.counts, batch.done_at is not None) == ("done", {"cancelled": 1}, True)
    assert batch.callback_job_id is not None
    assert job_row(engine, batch.callback_job_id).operation_key == f"batch:{batch.id}:callback"

"""`enqueue(..., after=[ids])` in the caller's transaction: the job waits queued, with no outbox row, until
the jobs it names have succeeded; an id its tenant does not have is refused before anything is written; the
same request again is the job it made, another under its key a conflict; `enqueue_many` and a kind
function's `enqueue` take `after` as `enqueue` does."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy import Connection, Engine, select

import outbox_bridge
from outbox_bridge import enqueuing
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, intake, workflows
from outbox_bridge.jobstore.schema import WAITING_AT, outbox
from outbox_bridge.jobstore.states import State
from tests.integration import test_enqueue
from tests.integration.test_enqueue import counts, orders
from tests.support.batches import fail, succeed
from tests.support.store import job_row, new_job

app_engine = test_enqueue.app_engine  # the application's own engine, with a business table

SHOP = {"tenant": "shop", "owner": "checkout"}
EXPORT = {"rows": 10, "chunk": 5}


@pytest.fixture(autouse=True)
def _deployment_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A deployment that names the kinds these tests enqueue (enqueue reads its settings once)."""
    for name in ("OUTBOX_BRIDGE_DEV", "MAX_ATTEMPTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ALLOWED_KINDS", "export,noop,after_step")
    monkeypatch.chdir(Path(__file__).parent)  # no .env here
    enqueuing._settings.cache_clear()
    yield
    enqueuing._settings.cache_clear()


class Step(BaseModel):
    n: int


@outbox_bridge.kind("after_step", payload=Step)
def step(ctx: outbox_bridge.JobContext, payload: Step) -> dict[str, int]:
    return {"n": payload.n}


def export(app_engine: Engine, key: str, **options: object) -> outbox_bridge.Job:
    with app_engine.begin() as conn:
        return outbox_bridge.enqueue(conn, "export", EXPORT, key=key, **SHOP, **options)  # type: ignore[arg-type]


def pending_outbox(engine: Engine, job_id: str) -> int:
    query = select(outbox.c.id).where(outbox.c.job_id == job_id, outbox.c.published_at.is_(None))
    return len(db.read(engine, lambda conn: conn.execute(query).all()))


def test_a_job_after_others_waits_without_an_outbox_row_until_they_have_succeeded(
    app_engine: Engine, engine: Engine, clock: FakeClock
) -> None:
    first, second = export(app_engine, "first"), export(app_engine, "second")
    with app_engine.begin() as conn:
        conn.execute(orders.insert().values(item="book"))
        then = outbox_bridge.enqueue(conn, "export", EXPORT, key="then", **SHOP, after=[first.id, second.id])
    assert (then.state, sorted(then.waiting_for)) == ("queued", sorted([first.id, second.id]))
    assert (job_row(engine, then.id).available_at, pending_outbox(engine, then.id)) == (WAITING_AT, 0)
    assert counts(app_engine) == (1, 3, 2)

    clock.advance(1)
    succeed(engine, first.id)
    succeed(engine, second.id)
    assert (job_row(engine, then.id).available_at, pending_outbox(engine, then.id)) == (clock.now(), 1)


def test_a_rolled_back_job_after_others_leaves_nothing(app_engine: Engine) -> None:
    first = export(app_engine, "first")
    with app_engine.connect() as conn, conn.begin() as transaction:
        outbox_bridge.enqueue(conn, "export", EXPORT, key="then", **SHOP, after=[first.id])
        transaction.rollback()
    assert counts(app_engine) == (0, 1, 1)


def test_the_same_request_again_is_the_job_it_made_and_another_after_is_a_conflict(
    app_engine: Engine,
) -> None:
    first, second = export(app_engine, "first"), export(app_engine, "second")
    made = export(app_engine, "then", after=[first.id])
    assert export(app_engine, "then", after=[first.id]) == made
    with pytest.raises(outbox_bridge.Conflict) as conflict:
        export(app_engine, "then", after=[second.id])
    with pytest.raises(outbox_bridge.Conflict):
        export(app_engine, "then", after=[first.id], on_dependency_failure="run")
    with pytest.raises(outbox_bridge.Conflict):
        export(app_engine, "then")
    assert conflict.value.job_id == made.id
    assert counts(app_engine) == (0, 3, 2)


def test_an_id_the_tenant_has_no_job_of_is_refused_and_nothing_is_written(
    app_engine: Engine, engine: Engine
) -> None:
    theirs = new_job(engine, "theirs", tenant="other")
    ours = export(app_engine, "ours")
    for missing in ("no-such-job", theirs):
        with app_engine.begin() as conn, pytest.raises(outbox_bridge.UnknownDependencies) as refused:
            outbox_bridge.enqueue(conn, "export", EXPORT, key="then", **SHOP, after=[ours.id, missing])
        assert isinstance(refused.value, outbox_bridge.InvalidJob) and refused.value.ids == [missing]
        assert missing in str(refused.value) and refused.value.errors[0]["loc"] == ["after"]
    assert counts(app_engine) == (0, 2, 2)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"after": []}, "after"),
        ({"after": "not-a-list"}, "after"),
        ({"after": ["a", "a"]}, "after"),
        ({"after": [f"id-{i}" for i in range(101)]}, "after"),
        ({"after": ["a"], "on_dependency_failure": "maybe"}, "on_dependency_failure"),
    ],
)
def test_an_after_out_of_bounds_is_an_invalid_job(app_engine: Engine, options: dict, said: str) -> None:
    with app_engine.begin() as conn, pytest.raises(outbox_bridge.InvalidJob) as refused:
        outbox_bridge.enqueue(conn, "export", EXPORT, key="then", **SHOP, **options)
    assert not isinstance(refused.value, outbox_bridge.UnknownDependencies)
    assert any(said in [str(part) for part in issue["loc"]] for issue in refused.value.errors)
    assert counts(app_engine) == (0, 0, 0)


def test_a_failed_dependency_cancels_the_job_unless_it_asked_to_run(
    app_engine: Engine, engine: Engine, clock: FakeClock
) -> None:
    first = export(app_engine, "first")
    cancelled = export(app_engine, "cancelled", after=[first.id])
    runs = export(app_engine, "runs", after=[first.id], on_dependency_failure="run")
    clock.advance(1)
    fail(engine, first.id)
    assert (job_row(engine, cancelled.id).state, job_row(engine, cancelled.id).error_code) == (
        State.CANCELLED,
        "dependency_failed",
    )
    assert (job_row(engine, runs.id).state, pending_outbox(engine, runs.id)) == (State.QUEUED, 1)


def test_a_job_after_one_already_ended_starts_as_that_ending_says(app_engine: Engine, engine: Engine) -> None:
    done, failed = export(app_engine, "done"), export(app_engine, "failed")
    succeed(engine, done.id)
    fail(engine, failed.id)
    due = export(app_engine, "due", after=[done.id])
    gone = export(app_engine, "gone", after=[done.id, failed.id])
    assert (due.state, due.waiting_for, pending_outbox(engine, due.id)) == ("queued", [], 1)
    assert (gone.state, gone.error, pending_outbox(engine, gone.id)) == (
        "cancelled",
        {"code": "dependency_failed", "message": f"a job it waits for ended failed: {failed.id}"},
        0,
    )


def test_enqueue_many_takes_after_in_order_and_refuses_an_unknown_id_before_writing_any(
    app_engine: Engine, engine: Engine
) -> None:
    first = export(app_engine, "first")
    specs = [
        outbox_bridge.JobSpec("export", EXPORT, key="a"),
        outbox_bridge.JobSpec("export", EXPORT, key="b", after=(first.id,)),
        outbox_bridge.JobSpec("export", EXPORT, key="c"),
    ]
    with app_engine.begin() as conn:
        jobs = outbox_bridge.enqueue_many(conn, specs, **SHOP)
    assert [job.waiting_for for job in jobs] == [[], [first.id], []]
    assert [job_row(engine, job.id).operation_key for job in jobs] == ["a", "b", "c"]

    more = [
        outbox_bridge.JobSpec("export", EXPORT, key="d"),
        outbox_bridge.JobSpec("export", EXPORT, key="e", after=[first.id]),
        outbox_bridge.JobSpec("export", EXPORT, key="f", after=[first.id, "no-such-job"]),
    ]
    with app_engine.begin() as conn, pytest.raises(outbox_bridge.UnknownDependencies) as refused:
        outbox_bridge.enqueue_many(conn, more, **SHOP)
    assert str(refused.value).startswith("jobs[2]: ") and refused.value.ids == ["no-such-job"]
    assert counts(app_engine) == (0, 4, 3)


def test_a_kind_functions_enqueue_takes_after(app_engine: Engine, engine: Engine) -> None:
    first = export(app_engine, "first")
    with app_engine.begin() as conn:
        job = step.enqueue(conn, Step(n=1), key="step", **SHOP, after=[first.id], on_dependency_failure="run")
    assert (job.kind, job.waiting_for) == ("after_step", [first.id])
    assert job_row(engine, job.id).available_at == WAITING_AT


def another_writer_is_locked_out(database: Path) -> bool:
    other = sqlite3.connect(database, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        return "locked" in str(exc)
    else:
        other.execute("ROLLBACK")
        return False
    finally:
        other.close()


@pytest.mark.databases("sqlite")
def test_on_sqlite_no_other_writer_gets_in_between_the_read_of_what_a_job_waits_for_and_its_write(
    app_engine: Engine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pysqlite opens a transaction only at its first write: a read of the states of the jobs named in
    `after` first in the caller's transaction would run outside it, and one of them ending in between would
    leave the new job waiting for an ending already past."""
    database = db.sqlite_path(settings)
    assert database is not None
    first = export(app_engine, "first")
    locked_out: list[bool] = []
    plan = workflows._plan

    def read_then_look(conn: Connection, p: intake.Prepared, after: workflows.After) -> Any:
        made = plan(conn, p, after)
        locked_out.append(another_writer_is_locked_out(database))
        return made

    monkeypatch.setattr(workflows, "_plan", read_then_look)
    with app_engine.begin() as conn:
        outbox_bridge.enqueue(conn, "export", EXPORT, key="then", **SHOP, after=[first.id])
    with app_engine.begin() as conn:
        outbox_bridge.enqueue_many(
            conn,
            [outbox_bridge.JobSpec("export", EXPORT, key=f"more-{i}", after=[first.id]) for i in range(2)],
            **SHOP,
        )
    assert locked_out == [True, True, True]
    assert not another_writer_is_locked_out(database)  # and the lock went with the commit

"""`outbox_bridge.enqueue_many`: up to 1,000 jobs in the caller's transaction, all or none, idempotent
job by job as `enqueue` is."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine

import outbox_bridge
from outbox_bridge import enqueuing
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.handlers.export import ExportPayload
from tests.integration import test_enqueue
from tests.integration.test_enqueue import counts, orders
from tests.support.store import job_row

app_engine = test_enqueue.app_engine  # the application's own engine, with a business table


@pytest.fixture(autouse=True)
def _deployment_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """enqueue reads the deployment's settings from the environment, once: here, a deployment that names
    the kinds these tests enqueue."""
    for name in ("OUTBOX_BRIDGE_DEV", "MAX_ATTEMPTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ALLOWED_KINDS", "export,notify")
    monkeypatch.chdir(Path(__file__).parent)  # no .env here
    enqueuing._settings.cache_clear()
    yield
    enqueuing._settings.cache_clear()


SHOP = {"tenant": "shop", "owner": "checkout"}


def exports(count: int, *, prefix: str = "export") -> list[outbox_bridge.JobSpec]:
    return [
        outbox_bridge.JobSpec("export", {"rows": i, "chunk": 5}, key=f"{prefix}-{i}") for i in range(count)
    ]


def test_the_jobs_are_written_in_the_callers_transaction_and_a_rollback_leaves_none(
    app_engine: Engine, engine: Engine, clock: FakeClock
) -> None:
    start = datetime.fromtimestamp(clock.now() + 600, tz=UTC)
    specs = [
        outbox_bridge.JobSpec("export", ExportPayload(rows=1, chunk=5), key="a", run_at=start),
        outbox_bridge.JobSpec("notify", {"to": "ann@example.com", "message": "hi"}, key="b", priority="high"),
        outbox_bridge.JobSpec("export", {"rows": 3, "chunk": 5}, key="c", concurrency_key="customer-7"),
    ]
    with app_engine.connect() as conn, conn.begin() as transaction:
        conn.execute(orders.insert().values(item="book"))
        outbox_bridge.enqueue_many(conn, specs, **SHOP)
        transaction.rollback()
    assert counts(app_engine) == (0, 0, 0)
    with app_engine.begin() as conn:
        conn.execute(orders.insert().values(item="book"))
        jobs = outbox_bridge.enqueue_many(conn, specs, **SHOP)
    assert counts(app_engine) == (1, 3, 3)
    assert [job.kind for job in jobs] == ["export", "notify", "export"]
    assert (jobs[0].run_at, jobs[1].priority, jobs[2].concurrency_key) == (start, "high", "customer-7")
    assert job_row(engine, jobs[0].id).payload == {"rows": 1, "chunk": 5}
    assert {job_row(engine, job.id).owner for job in jobs} == {"checkout"}


def test_the_same_jobs_again_are_the_jobs_they_made(app_engine: Engine) -> None:
    with app_engine.begin() as conn:
        first = outbox_bridge.enqueue_many(conn, exports(3), **SHOP)
    with app_engine.begin() as conn:
        again = outbox_bridge.enqueue_many(conn, [*exports(3), *exports(1, prefix="more")], **SHOP)
    assert [job.id for job in again[:3]] == [job.id for job in first]
    assert counts(app_engine) == (0, 4, 4)


def test_one_invalid_job_refuses_them_all_naming_its_index_and_writes_nothing(app_engine: Engine) -> None:
    specs = exports(3)
    specs[1] = outbox_bridge.JobSpec("export", {"rows": "ten", "chunk": 5}, key="bad")
    with pytest.raises(outbox_bridge.InvalidJob, match=r"^jobs\[1\]: The payload is not a valid export"):
        with app_engine.begin() as conn:
            conn.execute(orders.insert().values(item="book"))
            outbox_bridge.enqueue_many(conn, specs, **SHOP)
    with (
        pytest.raises(outbox_bridge.InvalidJob, match=r"^jobs\[2\]: .*not a dict"),
        app_engine.begin() as conn,
    ):
        outbox_bridge.enqueue_many(conn, [*exports(2), {"kind": "export"}], **SHOP)  # type: ignore[list-item]
    assert counts(app_engine) == (0, 0, 0)


def test_a_key_used_for_another_request_is_a_conflict_naming_its_index(app_engine: Engine) -> None:
    with app_engine.begin() as conn:
        (taken,) = outbox_bridge.enqueue_many(conn, exports(1), **SHOP)
    other = outbox_bridge.JobSpec("export", {"rows": 99, "chunk": 5}, key="export-0")
    with pytest.raises(outbox_bridge.Conflict, match=r"jobs\[1\]: ") as conflict, app_engine.begin() as conn:
        outbox_bridge.enqueue_many(conn, [*exports(1, prefix="new"), other], **SHOP)
    assert conflict.value.job_id == taken.id
    assert counts(app_engine) == (0, 1, 1)


def test_a_thousand_jobs_go_in_one_call_and_a_thousand_and_one_are_refused(app_engine: Engine) -> None:
    with pytest.raises(outbox_bridge.InvalidJob, match="at most 1000 jobs in one call, not 1001"):
        with app_engine.begin() as conn:
            outbox_bridge.enqueue_many(conn, exports(1001), **SHOP)
    assert counts(app_engine) == (0, 0, 0)
    with app_engine.begin() as conn:
        jobs = outbox_bridge.enqueue_many(conn, exports(1000), **SHOP)
    assert len({job.id for job in jobs}) == 1000
    assert counts(app_engine) == (0, 1000, 1000)


def test_no_jobs_is_no_write(app_engine: Engine) -> None:
    with app_engine.begin() as conn:
        assert outbox_bridge.enqueue_many(conn, [], **SHOP) == []
    assert counts(app_engine) == (0, 0, 0)

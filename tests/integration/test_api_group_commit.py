"""Group commit: submissions that arrive while a transaction is committing share the next one; a conflict
refuses only its own request; a batch that fails writes nothing and answers every request in it."""

from __future__ import annotations

import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from api.app import create_app
from api.auth import issue_token
from api.committer import accept_all
from jobstore import db
from jobstore import jobs as store
from jobstore.errors import IdempotencyConflict
from jobstore.schema import jobs, outbox
from jobstore.settings import Settings
from tests.conftest import make_settings


def counts(engine: Engine) -> tuple[int, int]:
    with engine.connect() as conn:
        return (
            conn.execute(select(func.count()).select_from(jobs)).scalar_one(),
            conn.execute(select(func.count()).select_from(outbox)).scalar_one(),
        )


def request(key: str, n: int) -> dict[str, Any]:
    return {
        "tenant": "acme",
        "owner": "alice",
        "kind": "noop",
        "payload": {"n": n},
        "operation_key": key,
        "now": 1_700_000_000.0,
        "max_attempts": 3,
    }


def test_a_conflicting_key_in_a_batch_refuses_only_its_own_request(
    settings: Settings, engine: Engine
) -> None:
    batch = [request("a", 1), request("b", 1), request("a", 2), request("a", 1)]
    outcomes = db.transact(engine, accept_all, batch)
    first, second, conflict, repeat = outcomes
    assert isinstance(first, store.Accepted) and first.created
    assert isinstance(second, store.Accepted) and second.created
    assert isinstance(conflict, IdempotencyConflict) and conflict.job_id == first.job.id
    assert isinstance(repeat, store.Accepted) and not repeat.created and repeat.job.id == first.job.id
    assert counts(engine) == (2, 2)


def _submit_concurrently(client: TestClient, settings: Settings, how_many: int) -> list[Any]:
    token = issue_token(settings.auth_secret, tenant="acme", user="alice")

    def submit(n: int) -> Any:
        headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": f"k-{n}"}
        return client.post("/jobs", json={"kind": "noop", "payload": {"n": n}}, headers=headers)

    with ThreadPoolExecutor(how_many) as pool:
        return list(pool.map(submit, range(how_many)))


def _hold_write_lock(path: Path, seconds: float) -> None:
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    time.sleep(seconds)
    holder.execute("ROLLBACK")
    holder.close()


def test_submissions_that_arrive_while_a_commit_waits_share_the_next_transaction(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, store_lock_timeout_seconds=10.0)
    engine = db.make_engine(settings)
    db.init_schema(settings, engine)
    with TestClient(create_app(settings)) as client, ThreadPoolExecutor(1) as locker:
        # While another connection holds the write lock, the first batch waits and the rest queue behind it.
        held = locker.submit(_hold_write_lock, tmp_path / "jobs.db", 1.5)
        time.sleep(0.2)
        before = db.stats.snapshot()["write_transactions"]
        answers = _submit_concurrently(client, settings, 20)
        held.result(timeout=10)
        transactions = db.stats.snapshot()["write_transactions"] - before
    assert [a.status_code for a in answers] == [202] * 20
    assert len({a.json()["id"] for a in answers}) == 20
    assert counts(engine) == (20, 20)
    assert transactions <= 3  # one per batch, not one per request
    engine.dispose()


@pytest.mark.databases("sqlite")  # a batch is made to fail with SQLite's write lock
def test_a_batch_that_cannot_commit_answers_every_request_503_and_writes_nothing(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, store_lock_timeout_seconds=0.5)
    engine = db.make_engine(settings)
    db.init_schema(settings, engine)
    with TestClient(create_app(settings)) as client, ThreadPoolExecutor(1) as locker:
        held = locker.submit(_hold_write_lock, tmp_path / "jobs.db", 2.0)
        time.sleep(0.2)
        answers = _submit_concurrently(client, settings, 10)
        held.result(timeout=10)
    assert [a.status_code for a in answers] == [503] * 10
    assert all(a.headers["retry-after"] for a in answers)
    assert counts(engine) == (0, 0)
    engine.dispose()

"""Group commit: submissions that arrive while a transaction is committing share the next one; a conflict
refuses only its own request; a batch the store cannot commit writes nothing and answers every request in it
503; a batch that fails because of one request commits the others and fails that one alone."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from outbox_bridge.api import committer as committer_module
from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.api.committer import GroupCommitter, accept_all
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, intake, migrate
from outbox_bridge.jobstore.errors import IdempotencyConflict, Unstorable
from outbox_bridge.jobstore.schema import jobs, outbox
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
    outcomes = db.transact(engine, accept_all, [intake.prepare(**r) for r in batch])
    first, second, conflict, repeat = outcomes
    assert isinstance(first, intake.Accepted) and first.created
    assert isinstance(second, intake.Accepted) and second.created
    assert isinstance(conflict, IdempotencyConflict) and conflict.job_id == first.job.id
    assert isinstance(repeat, intake.Accepted) and not repeat.created and repeat.job.id == first.job.id
    assert counts(engine) == (2, 2)


def _submit_concurrently(client: TestClient, settings: Settings, how_many: int) -> list[Any]:
    """`how_many` submissions at once."""
    token = issue_token(settings.auth_secret, tenant="acme", user="alice")

    def submit(n: int) -> Any:
        headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": f"k-{n}"}
        return client.post("/jobs", json={"kind": "noop", "payload": {"n": n}}, headers=headers)

    with ThreadPoolExecutor(how_many) as pool:
        return list(pool.map(submit, range(how_many)))


def _hold_write_lock_for(path: Path, seconds: float) -> None:
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    time.sleep(seconds)
    holder.execute("ROLLBACK")
    holder.close()


def _hold_write_lock(path: Path, queued: Callable[[], bool]) -> None:
    """Hold SQLite's write lock until `queued()` says the submissions wait for the group committer
    (however loaded the machine), at most 20 s."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    deadline = time.monotonic() + 20
    while not queued() and time.monotonic() < deadline:
        time.sleep(0.01)
    holder.execute("ROLLBACK")
    holder.close()


@pytest.mark.databases("sqlite")  # the commit is made to wait on SQLite's write lock
def test_submissions_that_arrive_while_a_commit_waits_share_the_next_transaction(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, store_lock_timeout_seconds=30.0)
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    app = create_app(settings)
    with TestClient(app) as client, ThreadPoolExecutor(1) as locker:
        # While another connection holds the write lock, the first batch waits and the rest queue behind it.
        committer = app.state.committer
        held = locker.submit(_hold_write_lock, tmp_path / "jobs.db", lambda: committer.received >= 20)
        time.sleep(0.2)
        before = db.stats.snapshot()["write_transactions"]
        answers = _submit_concurrently(client, settings, 20)
        held.result(timeout=30)
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
    migrate.init_schema(settings, engine)
    with TestClient(create_app(settings)) as client, ThreadPoolExecutor(1) as locker:
        held = locker.submit(_hold_write_lock_for, tmp_path / "jobs.db", 2.0)
        time.sleep(0.2)
        answers = _submit_concurrently(client, settings, 10)
        held.result(timeout=10)
    assert [a.status_code for a in answers] == [503] * 10
    assert all(a.headers["retry-after"] for a in answers)
    assert counts(engine) == (0, 0)
    engine.dispose()


# Identities no request should carry, which the database refuses: text UTF-8 cannot encode (both stores) and
# a NUL character (PostgreSQL's text columns).
REFUSED_TENANTS = {"sqlite": ["caf\udce9"], "postgresql": ["caf\udce9", "caf\x00e"]}


take_keys = intake.take_keys  # the writes of every accept, which the tests below wrap


def _gated_batches(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], threading.Event, threading.Event]:
    """Record the size of every batch the committer writes, and hold the first one inside its transaction
    (`entered` is set) until `gate` is set, so the requests sent meanwhile make up the next batch."""
    sizes: list[int] = []
    entered, gate = threading.Event(), threading.Event()

    def gated(conn: Any, requests: list[intake.Prepared]) -> Any:
        sizes.append(len(requests))
        if len(sizes) == 1:
            entered.set()
            assert gate.wait(10), "the test never opened the gate"
        return take_keys(conn, requests)

    monkeypatch.setattr(intake, "take_keys", gated)
    return sizes, entered, gate


def test_a_request_the_store_refuses_fails_alone_and_the_rest_of_its_batch_commits(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes, entered, gate = _gated_batches(monkeypatch)
    refused = REFUSED_TENANTS[engine.dialect.name]
    tenants = ["t-0", "t-1", "t-2", *refused, "t-3", "t-4", "t-5"]
    committer = GroupCommitter(engine)

    async def submit() -> list[Any]:
        opener = asyncio.ensure_future(committer.accept(**request("opener", 0)))
        await asyncio.to_thread(entered.wait, 10)
        batch = [asyncio.ensure_future(committer.accept(**{**request(t, 1), "tenant": t})) for t in tenants]
        await asyncio.sleep(0)  # each of them has queued its request
        gate.set()
        return await asyncio.gather(opener, *batch, return_exceptions=True)

    try:
        opened, *outcomes = asyncio.run(submit())
    finally:
        committer.close()

    assert isinstance(opened, intake.Accepted) and opened.created
    for tenant, outcome in zip(tenants, outcomes, strict=True):
        if tenant in refused:
            assert isinstance(outcome, Unstorable), outcome
        else:
            assert isinstance(outcome, intake.Accepted) and outcome.created, outcome
    assert sizes == [1, len(tenants)] + [1] * len(tenants), "one batch, then each request on its own"
    good = len(tenants) - len(refused)
    assert counts(engine) == (1 + good, 1 + good)


def test_a_request_the_store_refuses_is_answered_400_not_503(
    settings: Settings, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refusing(conn: Any, requests: list[intake.Prepared]) -> Any:
        if any(r.accepted.job.payload.get("refuse") for r in requests):
            raise UnicodeEncodeError("utf-8", "caf\udce9", 3, 4, "surrogates not allowed")
        return take_keys(conn, requests)

    monkeypatch.setattr(intake, "take_keys", refusing)
    token = issue_token(settings.auth_secret, tenant="acme", user="alice")
    with TestClient(create_app(settings)) as client:
        answers = [
            client.post(
                "/jobs",
                json={"kind": "noop", "payload": {"refuse": refuse}},
                headers={"Authorization": f"Bearer {token}", "Idempotency-Key": f"k-{refuse}"},
            )
            for refuse in (True, False)
        ]
    assert [a.status_code for a in answers] == [400, 202]
    assert answers[0].json()["type"] == "urn:outbox-bridge:problem:invalid-request"
    assert counts(engine) == (1, 1)


def test_requests_that_come_together_wait_briefly_for_each_other_and_a_lone_one_does_not(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes, entered, gate = _gated_batches(monkeypatch)
    monkeypatch.setattr(committer_module, "GATHER_SECONDS", 0.3)
    committer = GroupCommitter(engine)

    async def submit() -> float:
        opener = asyncio.ensure_future(committer.accept(**request("opener", 0)))
        await asyncio.to_thread(entered.wait, 10)
        together = [asyncio.ensure_future(committer.accept(**request(k, 1))) for k in ("a", "b")]
        await asyncio.sleep(0)  # both queued behind the held batch
        gate.set()
        await asyncio.gather(opener, *together)  # a batch of two: the next ones are gathered
        first = asyncio.ensure_future(committer.accept(**request("c", 1)))
        await asyncio.sleep(0.05)  # well within the gathering pause
        await asyncio.gather(first, committer.accept(**request("d", 1)))
        await committer.accept(**request("e", 1))  # after a batch of two: gathered, alone
        started = time.monotonic()
        await committer.accept(**request("f", 1))  # after a batch of one: at once
        return time.monotonic() - started

    try:
        lone = asyncio.run(submit())
    finally:
        committer.close()
    assert sizes == [1, 2, 2, 1, 1]
    assert lone < 0.3, f"a lone request waited {lone:.2f}s"
    assert counts(engine) == (7, 7)

"""A kind's uniqueness window (`@kind(unique_for_seconds=...)`): within it, a request of the same tenant, kind
and payload under any other key answers with the job that holds the window; the key is checked first; a
batch takes a window once; retention frees the window of a job it deletes; racing accepts make one job. On
both stores, through the store's accept, `enqueue_many` and `POST /jobs`."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeAlias

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel
from sqlalchemy import Engine, func, select

import outbox_bridge
from outbox_bridge import enqueuing
from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.handlers import base
from outbox_bridge.jobstore import db, intake, operator, retention
from outbox_bridge.jobstore.errors import IdempotencyConflict
from outbox_bridge.jobstore.priorities import Priority
from outbox_bridge.jobstore.schema import job_uniques, jobs, outbox
from outbox_bridge.jobstore.states import State
from tests.integration import test_enqueue

app_engine = test_enqueue.app_engine

WINDOW = 60.0
THREADS = 8

Outcome: TypeAlias = intake.Accepted | IdempotencyConflict


def fields(key: str, payload: dict[str, Any], now: float, **more: Any) -> dict[str, Any]:
    """`intake.accept`'s keyword arguments for a noop job of tenant acme with a window of `WINDOW`."""
    return {
        "tenant": "acme", "owner": "alice", "kind": "noop", "payload": payload, "operation_key": key,
        "now": now, "max_attempts": 3, "unique_for_seconds": WINDOW, **more,
    }  # fmt: skip


def accept(engine: Engine, key: str, payload: dict[str, Any], now: float, **more: Any) -> intake.Accepted:
    return db.transact(engine, intake.accept, **fields(key, payload, now, **more))


def count(engine: Engine, table: Any) -> int:
    return db.read(
        engine, lambda conn: int(conn.execute(select(func.count()).select_from(table)).scalar_one())
    )


def windows(engine: Engine) -> list[tuple[str, str]]:
    """(tenant, job id) of every window row."""
    return db.read(
        engine,
        lambda conn: [tuple(r) for r in conn.execute(select(job_uniques.c.tenant, job_uniques.c.job_id))],
    )


def test_the_same_payload_within_the_window_answers_with_the_first_job_under_any_key(
    engine: Engine, clock: FakeClock
) -> None:
    first = accept(engine, "k-1", {"n": 1}, clock.now())
    clock.advance(WINDOW - 1)
    again = accept(engine, "k-2", {"n": 1}, clock.now(), priority=Priority.HIGH)
    assert first.created and not again.created
    assert again.job == first.job
    assert (count(engine, jobs), count(engine, outbox)) == (1, 1)
    assert windows(engine) == [("acme", first.job.id)]


def test_another_payload_kind_or_tenant_is_a_job_of_its_own(engine: Engine, clock: FakeClock) -> None:
    now = clock.now()
    first = accept(engine, "k-1", {"n": 1}, now)
    others = [
        accept(engine, "k-2", {"n": 2}, now),
        accept(engine, "k-3", {"n": 1}, now, kind="sleep"),
        accept(engine, "k-1", {"n": 1}, now, tenant="other"),
    ]
    assert all(o.created for o in others)
    assert len({first.job.id, *(o.job.id for o in others)}) == 4
    assert count(engine, job_uniques) == 4


def test_once_the_window_has_passed_a_new_job_takes_it(engine: Engine, clock: FakeClock) -> None:
    first = accept(engine, "k-1", {"n": 1}, clock.now())
    clock.advance(WINDOW)
    second = accept(engine, "k-2", {"n": 1}, clock.now())
    third = accept(engine, "k-3", {"n": 1}, clock.now())
    assert second.created and second.job.id != first.job.id
    assert not third.created and third.job.id == second.job.id
    assert windows(engine) == [("acme", second.job.id)]
    assert count(engine, jobs) == 2


def test_the_key_is_checked_before_the_window(engine: Engine, clock: FakeClock) -> None:
    now = clock.now()
    first = accept(engine, "k-1", {"n": 1}, now)
    other = accept(engine, "k-2", {"n": 2}, now)
    assert accept(engine, "k-1", {"n": 1}, now).job.id == first.job.id  # the same request again
    with pytest.raises(IdempotencyConflict) as conflict:  # another request under a taken key
        accept(engine, "k-2", {"n": 1}, now)
    assert conflict.value.job_id == other.job.id
    clock.advance(WINDOW * 2)
    late = accept(engine, "k-1", {"n": 1}, clock.now())  # the key outlives the window
    assert not late.created and late.job.id == first.job.id
    assert count(engine, jobs) == 2


def test_a_finished_holder_still_answers_within_its_window(engine: Engine, clock: FakeClock) -> None:
    first = accept(engine, "k-1", {"n": 1}, clock.now())
    db.transact(engine, operator.request_cancel, first.job.id, clock.now())
    clock.advance(1)
    again = accept(engine, "k-2", {"n": 1}, clock.now())
    assert not again.created
    assert (again.job.id, again.job.state) == (first.job.id, State.CANCELLED)


def test_retention_frees_the_window_of_a_job_it_deletes(engine: Engine, clock: FakeClock) -> None:
    first = accept(engine, "k-1", {"n": 1}, clock.now())
    db.transact(engine, operator.request_cancel, first.job.id, clock.now())
    clock.advance(1)
    assert db.transact(engine, retention.prune, clock.now()) == [first.job.id]
    assert count(engine, job_uniques) == 0  # with the job, by the foreign key
    clock.advance(1)  # still within the window the deleted job held
    again = accept(engine, "k-2", {"n": 1}, clock.now())
    assert again.created and windows(engine) == [("acme", again.job.id)]


@pytest.mark.parametrize("how", ["in_the_callers_transaction", "committed"])
def test_a_batch_takes_a_window_once_as_accepts_one_after_another_would(
    engine: Engine, clock: FakeClock, how: str
) -> None:
    held = accept(engine, "held", {"n": 0}, clock.now())
    now = clock.now()
    batch = [
        fields("k-1", {"n": 1}, now),
        fields("k-2", {"n": 1}, now),  # the window the request before took
        fields("k-3", {"n": 2}, now),
        fields("k-4", {"n": 0}, now),  # a window held before the batch
        fields("k-5", {"n": 0}, now),  # the same window, under a key no job took ...
        fields("k-5", {"n": 3}, now),  # ... which the next request with a free window takes
        fields("k-6", {"n": 4}, now, unique_for_seconds=None),  # a kind without a window
    ]
    prepared = [intake.prepare(**f) for f in batch]
    if how == "committed":  # as the api's group commit writes it
        outcomes = intake.accept_committed(engine, lambda: prepared)
    else:
        outcomes = db.transact(engine, intake.accept_prepared, prepared)

    answers = [o for o in outcomes if isinstance(o, intake.Accepted)]
    assert len(answers) == len(batch)
    ids = [a.job.id for a in answers]
    assert [a.created for a in answers] == [True, False, True, False, False, True, True]
    assert ids[1] == ids[0] and ids[3] == ids[4] == held.job.id
    assert len({ids[0], ids[2], ids[5], ids[6], held.job.id}) == 5
    assert answers[5].job.operation_key == "k-5"
    assert count(engine, jobs) == count(engine, outbox) == 5
    assert sorted(job_id for _, job_id in windows(engine)) == sorted([held.job.id, ids[0], ids[2], ids[5]])


def test_a_committed_batch_with_windows_is_one_statement_on_postgresql(
    engine: Engine, clock: FakeClock
) -> None:
    prepared = [intake.prepare(**fields(f"k-{n}", {"n": n}, clock.now())) for n in range(3)]
    before = db.stats.snapshot()
    outcomes = intake.accept_committed(engine, lambda: prepared)
    after = db.stats.snapshot()
    spent = {name: after[name] - before[name] for name in ("statements", "write_transactions")}
    assert [o.created for o in outcomes if isinstance(o, intake.Accepted)] == [True] * 3
    assert count(engine, job_uniques) == 3
    if engine.dialect.name == "postgresql":
        assert spent == {"statements": 1, "write_transactions": 1}, spent


def race(work: Callable[[int], Any]) -> list[Any]:
    """`work(i)` on `THREADS` threads released together, each with connections of its own."""
    gate = threading.Barrier(THREADS)

    def released(i: int) -> Any:
        gate.wait(timeout=30)
        return work(i)

    with ThreadPoolExecutor(THREADS) as pool:
        return [f.result(timeout=120) for f in [pool.submit(released, i) for i in range(THREADS)]]


def accept_racing(engine: Engine, how: str, key: str, payload: dict[str, Any], now: float) -> Outcome:
    if how == "committed":
        (outcome,) = intake.accept_committed(engine, lambda: [intake.prepare(**fields(key, payload, now))])
        return outcome
    try:
        return accept(engine, key, payload, now)
    except IdempotencyConflict as conflict:
        return conflict


@pytest.mark.databases("sqlite", "postgresql")
@pytest.mark.parametrize("how", ["transaction", "committed"])
def test_racing_accepts_of_one_payload_under_different_keys_make_one_job(
    engine: Engine, clock: FakeClock, how: str
) -> None:
    rounds = 5
    for n in range(rounds):

        def submit(i: int, n: int = n) -> Outcome:
            return accept_racing(engine, how, f"k-{n}-{i}", {"n": n}, clock.now())

        answers = race(submit)
        assert all(isinstance(a, intake.Accepted) for a in answers), answers
        assert len({a.job.id for a in answers}) == 1, f"round {n}: one job for every caller"
        assert sum(a.created for a in answers) == 1, f"round {n}: created once"
    assert count(engine, jobs) == count(engine, outbox) == count(engine, job_uniques) == rounds


@pytest.mark.databases("sqlite", "postgresql")
def test_racing_accepts_of_one_key_with_payloads_of_their_own_make_one_job_and_conflicts(
    engine: Engine, clock: FakeClock
) -> None:
    # Each takes a window of its own, and all but the first to commit find the key taken.
    rounds = 5
    for n in range(rounds):

        def submit(i: int, n: int = n) -> Outcome:
            return accept_racing(engine, "transaction", f"k-{n}", {"n": n, "i": i}, clock.now())

        answers = race(submit)
        created = [a for a in answers if isinstance(a, intake.Accepted)]
        assert len(created) == 1 and created[0].created, answers
        assert all(a.job_id == created[0].job.id for a in answers if isinstance(a, IdempotencyConflict))
    assert count(engine, jobs) == count(engine, job_uniques) == rounds
    assert {job_id for _, job_id in windows(engine)} == set(
        db.read(engine, lambda conn: conn.execute(select(jobs.c.id)).scalars().all())
    )


class Digest(BaseModel):
    account: str
    days: int = 7


@pytest.fixture
def digest_kind() -> Iterator[Any]:
    """A team's kind with a uniqueness window, `team.digest`, known to this process for the test only."""
    known, defined_in = dict(base.KINDS), dict(base._DEFINED_IN)

    def digest(ctx: outbox_bridge.JobContext, payload: Digest) -> None:
        return None

    yield outbox_bridge.kind("team.digest", payload=Digest, unique_for_seconds=WINDOW)(digest)
    base.KINDS.clear()
    base.KINDS.update(known)
    base._DEFINED_IN.clear()
    base._DEFINED_IN.update(defined_in)


@pytest.fixture
def post(
    settings_factory: Any, engine: Engine, clock: FakeClock, digest_kind: Any
) -> Iterator[Callable[..., Any]]:
    settings = settings_factory(allowed_kinds=("team.digest",))
    token = issue_token(settings.auth_secret, tenant="acme", user="alice")
    with TestClient(create_app(settings), follow_redirects=False) as client:

        def send(key: str, payload: dict[str, Any]) -> Any:
            headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}
            return client.post("/jobs", json={"kind": "team.digest", "payload": payload}, headers=headers)

        yield send


def test_post_jobs_under_another_key_within_the_window_answers_202_with_the_same_job(
    post: Callable[..., Any], engine: Engine, clock: FakeClock
) -> None:
    first = post("k-1", {"account": "a"})
    again = post("k-2", {"account": "a", "days": 7})  # the same payload, as the kind reads it
    other = post("k-3", {"account": "b"})
    assert (first.status_code, again.status_code, other.status_code) == (202, 202, 202), first.text
    assert again.json()["id"] == first.json()["id"] != other.json()["id"]
    assert again.headers["Location"] == first.headers["Location"]
    clock.advance(WINDOW)
    later = post("k-4", {"account": "a"})
    assert later.status_code == 202 and later.json()["id"] not in {first.json()["id"], other.json()["id"]}
    assert count(engine, jobs) == 3


@pytest.fixture
def _deployment_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A deployment, as `enqueue` reads it from the environment, that accepts `team.digest`."""
    for name in ("OUTBOX_BRIDGE_DEV", "MAX_ATTEMPTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ALLOWED_KINDS", "team.digest")
    monkeypatch.chdir(Path(__file__).parent)  # no .env here
    enqueuing._settings.cache_clear()
    yield
    enqueuing._settings.cache_clear()


@pytest.mark.usefixtures("_deployment_settings")
def test_enqueue_many_takes_a_window_once(app_engine: Engine, engine: Engine, digest_kind: Any) -> None:
    specs = [
        outbox_bridge.JobSpec("team.digest", {"account": "a"}, key="e-1"),
        outbox_bridge.JobSpec("team.digest", Digest(account="a"), key="e-2"),
        outbox_bridge.JobSpec("team.digest", {"account": "b"}, key="e-3"),
    ]
    with app_engine.begin() as conn:
        first, again, other = outbox_bridge.enqueue_many(conn, specs, tenant="shop", owner="checkout")
    with app_engine.begin() as conn:
        later = digest_kind.enqueue(conn, Digest(account="a"), key="e-4", tenant="shop", owner="checkout")
    assert again.id == first.id == later.id != other.id
    assert count(engine, jobs) == 2

"""accept: the job row and its outbox row are written together, once per tenant and idempotency key."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Connection, Engine, func, select, text
from sqlalchemy.exc import DBAPIError

from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import db, intake, queries
from outbox_bridge.jobstore.errors import IdempotencyConflict
from outbox_bridge.jobstore.schema import jobs, outbox
from outbox_bridge.jobstore.states import State
from tests.support.store import accept, add_job


def count(engine: Engine, table: Any) -> int:
    return db.read(
        engine, lambda conn: int(conn.execute(select(func.count()).select_from(table)).scalar_one())
    )


def test_a_new_job_is_queued_and_available_at_once(engine: Engine, clock: FakeClock) -> None:
    accepted = accept(engine, payload={"n": 1})
    job = accepted.job
    assert accepted.created
    assert (job.state, job.epoch, job.attempts, job.max_attempts) == (State.QUEUED, 0, 0, 3)
    assert job.available_at == job.created_at == clock.now()
    assert (job.tenant, job.owner, job.kind, job.payload) == ("acme", "alice", "noop", {"n": 1})
    assert job.deadline_at is None and not job.cancel_requested and job.result_attempt_id is None


def test_a_deadline_is_counted_from_acceptance(engine: Engine, clock: FakeClock) -> None:
    assert accept(engine, deadline=90).job.deadline_at == clock.now() + 90


def test_the_job_row_and_its_outbox_row_are_written_together(engine: Engine, clock: FakeClock) -> None:
    job = accept(engine).job
    rows = db.read(engine, lambda conn: conn.execute(select(outbox)).mappings().all())
    assert [(r["job_id"], r["available_at"], r["published_at"]) for r in rows] == [
        (job.id, clock.now(), None)
    ]


REFUSE_OUTBOX = {
    "sqlite": [
        "CREATE TRIGGER refuse_outbox BEFORE INSERT ON outbox "
        "BEGIN SELECT RAISE(ABORT, 'outbox refused'); END"
    ],
    "postgresql": [
        "CREATE FUNCTION refuse_outbox() RETURNS trigger LANGUAGE plpgsql "
        "AS $$ BEGIN RAISE EXCEPTION 'outbox refused'; END $$",
        "CREATE TRIGGER refuse_outbox BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION refuse_outbox()",
    ],
}


def test_no_job_row_survives_when_its_outbox_row_cannot_be_written(engine: Engine, clock: FakeClock) -> None:
    def refuse_outbox_rows(conn: Connection) -> None:
        for statement in REFUSE_OUTBOX[engine.dialect.name]:
            conn.execute(text(statement))

    db.transact(engine, refuse_outbox_rows)
    with pytest.raises(DBAPIError, match="outbox refused"):
        accept(engine)
    assert count(engine, jobs) == 0


def test_no_rows_survive_when_the_callers_transaction_fails_after_accept(
    engine: Engine, clock: FakeClock
) -> None:
    def accept_then_fail(conn: Connection) -> None:
        add_job(conn)
        raise RuntimeError("the caller failed after accepting")

    with pytest.raises(RuntimeError):
        db.transact(engine, accept_then_fail)
    assert (count(engine, jobs), count(engine, outbox)) == (0, 0)


def test_the_same_key_and_payload_return_the_same_job_without_a_second_row(
    engine: Engine, clock: FakeClock
) -> None:
    first = accept(engine, payload={"a": 1, "b": [1, 2]})
    clock.advance(5)
    again = accept(engine, payload={"b": [1, 2], "a": 1})
    assert not again.created
    assert again.job == first.job
    assert (count(engine, jobs), count(engine, outbox)) == (1, 1)


TRACE_A = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_B = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_retry_under_another_trace_is_the_same_request_and_keeps_the_first_trace(
    engine: Engine, clock: FakeClock
) -> None:
    first = accept(engine, payload={"n": 1}, traceparent=TRACE_A)
    again = accept(engine, payload={"n": 1}, traceparent=TRACE_B)
    untraced = accept(engine, payload={"n": 1})
    assert first.created and not again.created and not untraced.created
    assert first.job.traceparent == again.job.traceparent == untraced.job.traceparent == TRACE_A
    assert db.read(engine, queries.get_job, first.job.id).traceparent == TRACE_A  # type: ignore[union-attr]
    assert (count(engine, jobs), count(engine, outbox)) == (1, 1)


@pytest.mark.parametrize(
    ("kind", "payload"), [("noop", {"n": 2}), ("sleep", {"n": 1})], ids=["payload", "kind"]
)
def test_the_same_key_with_a_different_request_is_an_idempotency_conflict(
    engine: Engine, clock: FakeClock, kind: str, payload: dict[str, Any]
) -> None:
    first = accept(engine, payload={"n": 1})
    with pytest.raises(IdempotencyConflict) as conflict:
        accept(engine, kind=kind, payload=payload)
    assert conflict.value.job_id == first.job.id
    assert (count(engine, jobs), count(engine, outbox)) == (1, 1)


def test_the_idempotency_key_is_scoped_to_the_tenant(engine: Engine, clock: FakeClock) -> None:
    ours = accept(engine, tenant="acme", key="shared", payload={"n": 1})
    theirs = accept(engine, tenant="globex", key="shared", payload={"n": 2})
    assert ours.created and theirs.created
    assert ours.job.id != theirs.job.id
    assert (count(engine, jobs), count(engine, outbox)) == (2, 2)


def test_the_fingerprint_ignores_key_order_but_not_values() -> None:
    assert intake.fingerprint("noop", {"a": 1, "b": 2}) == intake.fingerprint("noop", {"b": 2, "a": 1})
    assert intake.fingerprint("noop", {"a": 1}) != intake.fingerprint("noop", {"a": "1"})
    assert intake.fingerprint("noop", {"a": 1}) != intake.fingerprint("sleep", {"a": 1})
    assert intake.fingerprint("noop", {}, 60) != intake.fingerprint("noop", {}, 61)
    assert intake.fingerprint("noop", {}, 60) != intake.fingerprint("noop", {})
    assert intake.fingerprint("noop", {}, 60) == intake.fingerprint("noop", {}, 60.0)


def test_the_same_key_with_another_deadline_is_a_conflict(engine: Engine, clock: FakeClock) -> None:
    original = accept(engine, tenant="acme", key="k", payload={}, deadline=60)
    again = accept(engine, tenant="acme", key="k", payload={}, deadline=60)
    assert again.job.id == original.job.id and not again.created
    with pytest.raises(IdempotencyConflict):
        accept(engine, tenant="acme", key="k", payload={}, deadline=120)


def request(key: str, payload: dict[str, Any], now: float, tenant: str = "acme") -> dict[str, Any]:
    return {
        "tenant": tenant, "owner": "alice", "kind": "noop", "payload": payload, "operation_key": key,
        "now": now, "max_attempts": 3,
    }  # fmt: skip


@pytest.mark.parametrize("how", ["in_the_callers_transaction", "committed"])
def test_a_batch_of_accepts_answers_each_request_as_accepts_one_after_another_would(
    engine: Engine, clock: FakeClock, how: str
) -> None:
    earlier = accept(engine, key="known", payload={"n": 0})
    now = clock.now()
    batch = [
        request("new-1", {"n": 1}, now),
        request("known", {"n": 0}, now),  # a retry of an earlier request: that job again
        request("known", {"n": 9}, now),  # the earlier key with another payload: a conflict
        request("new-2", {"n": 2}, now),
        request("new-2", {"n": 2}, now),  # twice in one batch: accepted once
        request("new-2", {"n": 3}, now),  # then a conflict with the job of this batch
        request("new-1", {"n": 1}, now, tenant="other"),  # keys are per tenant
    ]
    prepared = [intake.prepare(**fields) for fields in batch]
    if how == "committed":  # as the api's group commit and the benchmark accept
        outcomes = intake.accept_committed(engine, lambda: prepared)
    else:
        outcomes = db.transact(engine, intake.accept_prepared, prepared)

    first, again, conflict, second, second_again, second_conflict, other = outcomes
    assert isinstance(first, intake.Accepted) and first.created
    assert isinstance(again, intake.Accepted) and not again.created and again.job.id == earlier.job.id
    assert isinstance(conflict, IdempotencyConflict) and conflict.job_id == earlier.job.id
    assert isinstance(second, intake.Accepted) and second.created
    assert isinstance(second_again, intake.Accepted) and not second_again.created
    assert second_again.job.id == second.job.id
    assert isinstance(second_conflict, IdempotencyConflict) and second_conflict.job_id == second.job.id
    assert isinstance(other, intake.Accepted) and other.created and other.job.tenant == "other"

    created = [first, second, other]
    assert count(engine, jobs) == 1 + len(created)
    rows = db.read(engine, lambda conn: conn.execute(select(outbox.c.job_id, outbox.c.available_at)).all())
    assert sorted(rows) == sorted([(earlier.job.id, now), *[(a.job.id, now) for a in created]])
    for accepted in created:
        stored = db.read(engine, queries.get_job, accepted.job.id)
        assert stored == accepted.job
        assert stored is not None and stored.state is State.QUEUED and stored.payload == accepted.job.payload


def test_a_committed_batch_of_new_keys_is_one_statement_on_postgresql(
    engine: Engine, clock: FakeClock
) -> None:
    prepared = [intake.prepare(**request(f"new-{n}", {"n": n}, clock.now())) for n in range(3)]
    before = db.stats.snapshot()
    outcomes = intake.accept_committed(engine, lambda: prepared)
    after = db.stats.snapshot()
    spent = {
        name: after[name] - before[name] for name in ("statements", "write_transactions", "read_transactions")
    }
    assert [o.created for o in outcomes if isinstance(o, intake.Accepted)] == [True] * 3
    assert count(engine, jobs) == count(engine, outbox) == 3
    # The jobs, their outbox rows and the relays' notification: one statement that commits by itself.
    if engine.dialect.name == "postgresql":
        assert spent == {"statements": 1, "write_transactions": 1, "read_transactions": 0}, spent
    else:
        assert spent["write_transactions"] == 1 and spent["read_transactions"] == 0, spent


def test_an_empty_batch_writes_nothing(engine: Engine) -> None:
    assert db.transact(engine, intake.accept_prepared, []) == []
    assert count(engine, jobs) == count(engine, outbox) == 0

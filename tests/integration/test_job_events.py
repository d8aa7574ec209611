"""One structured log event per committed job state transition, on `outbox_bridge.events`, read back as the
JSON lines a process writes under LOG_FORMAT=json: who (job, tenant, kind), where (epoch, attempt), never the
payload or the result, and nothing for a write that rolled back or was refused."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Connection, Engine

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import db, fenced, operator, sweeper
from outbox_bridge.jobstore.errors import Fenced
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.states import State
from outbox_bridge.telemetry import logs
from tests.support.store import LEASE, add_job, claimed, new_job, publish_due

SECRET = "payload-value-7f3a"  # appears in every payload: it must never reach a log line
RESULT = "result-value-91c2"  # the same for every result
BACKOFF = Backoff(base=0.05, cap=0.5)


class Lines:
    """What `outbox_bridge.events` wrote, as JSON lines."""

    def __init__(self) -> None:
        self.stream = io.StringIO()

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    def all(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.text.splitlines()]

    def of(self, job_id: str) -> list[dict[str, Any]]:
        return [line for line in self.all() if line["job_id"] == job_id]

    def events(self, job_id: str) -> list[str]:
        return [line["event"] for line in self.of(job_id)]


@pytest.fixture
def lines() -> Iterator[Lines]:
    captured = Lines()
    handler = logging.StreamHandler(captured.stream)
    handler.setFormatter(logs.JsonFormatter("test"))
    logs.EVENTS.addHandler(handler)
    logs.EVENTS.setLevel(logging.INFO)
    yield captured
    logs.EVENTS.removeHandler(handler)
    logs.EVENTS.setLevel(logging.NOTSET)


def job(engine: Engine, key: str = "k", **fields: Any) -> str:
    return new_job(engine, key, tenant="acme", kind="noop", payload={"secret": SECRET}, **fields)


def complete(engine: Engine, clock: FakeClock, held: Claim) -> list[State | None]:
    done = fenced.Completion(held.job_id, held.epoch, held.attempt_id, {"result": RESULT})
    return db.transact(engine, fenced.complete_many, [done], clock.now())


def fail(engine: Engine, clock: FakeClock, held: Claim, *, permanent: bool) -> State:
    decision = db.transact(
        engine, fenced.fail, held.job_id, held.epoch, held.attempt_id, code="upstream", message=SECRET,
        permanent=permanent, now=clock.now(), backoff=BACKOFF,
    )  # fmt: skip
    return decision.state


def test_a_job_that_succeeds_logs_accepted_claimed_and_succeeded_with_its_identity(
    engine: Engine, clock: FakeClock, lines: Lines
) -> None:
    job_id = job(engine)
    held = claimed(engine, job_id, "w1")
    assert complete(engine, clock, held) == [State.SUCCEEDED]

    accepted, claim, succeeded = lines.of(job_id)
    identity = {"job_id": job_id, "tenant": "acme", "kind": "noop", "trace_id": None}
    assert accepted == {**accepted, **identity, "event": "accepted", "epoch": 0, "attempt": 0}
    assert accepted["level"] == "INFO"
    assert claim == {**claim, **identity, "event": "claimed", "epoch": 1, "attempt": 1, "worker": "w1"}
    assert succeeded == {**succeeded, **identity, "event": "succeeded", "epoch": 1, "attempt": 1}
    assert all(line["logger"] == "outbox_bridge.events" for line in (accepted, claim, succeeded))
    assert SECRET not in lines.text and RESULT not in lines.text


def test_a_permanent_failure_is_a_warning_and_a_retry_a_requeue(
    engine: Engine, clock: FakeClock, lines: Lines
) -> None:
    retried, failing = job(engine, "a"), job(engine, "b")
    assert fail(engine, clock, claimed(engine, retried), permanent=False) is State.QUEUED
    assert fail(engine, clock, claimed(engine, failing), permanent=True) is State.FAILED

    requeued = lines.of(retried)[-1]
    assert (requeued["event"], requeued["level"], requeued["reason"]) == ("requeued", "INFO", "retry")
    failed = lines.of(failing)[-1]
    assert (failed["event"], failed["level"], failed["error_code"]) == ("failed", "WARNING", "upstream")
    assert (failed["tenant"], failed["kind"], failed["epoch"], failed["attempt"]) == ("acme", "noop", 1, 1)
    assert SECRET not in lines.text  # the error message can quote the payload: only its code is logged


def test_the_last_attempt_failing_is_dead_at_warning(engine: Engine, clock: FakeClock, lines: Lines) -> None:
    job_id = job(engine, max_attempts=1)
    assert fail(engine, clock, claimed(engine, job_id), permanent=False) is State.DEAD
    assert lines.events(job_id) == ["accepted", "claimed", "dead"]
    assert lines.of(job_id)[-1]["level"] == "WARNING"


def test_cancel_requeue_and_resolve_are_logged_as_they_commit(
    engine: Engine, clock: FakeClock, lines: Lines
) -> None:
    cancelled = job(engine, "a")
    db.transact(engine, operator.request_cancel, cancelled, clock.now())
    lost = job(engine, "b")
    held = claimed(engine, lost)
    db.transact(engine, fenced.mark_external_started, lost, held.epoch, held.attempt_id, clock.now())
    clock.advance(LEASE)
    db.transact(engine, sweeper.sweep_expired, clock.now(), backoff=BACKOFF)
    db.transact(engine, operator.resolve, lost, State.FAILED, "checked upstream", clock.now(), actor="ops")
    db.transact(engine, operator.requeue, lost, clock.now(), actor="ops")

    assert lines.events(cancelled) == ["accepted", "cancelled"]
    assert lines.of(cancelled)[-1]["tenant"] == "acme"
    assert lines.events(lost) == ["accepted", "claimed", "unknown", "resolved", "requeued"]
    unknown, resolved, requeued = lines.of(lost)[2:]
    assert (unknown["level"], unknown["error_code"], unknown["epoch"]) == ("WARNING", "outcome_unknown", 1)
    assert (resolved["state"], resolved["actor"], resolved["level"]) == ("failed", "ops", "INFO")
    assert (requeued["reason"], requeued["actor"], requeued["kind"]) == ("operator", "ops", "noop")


def test_a_checkpoint_and_a_publish_are_logged(engine: Engine, clock: FakeClock, lines: Lines) -> None:
    job_id = job(engine)
    assert len(publish_due(engine)) == 1
    held = claimed(engine, job_id)
    db.transact(engine, fenced.save_checkpoint, job_id, held.epoch, {"at": SECRET}, clock.now())

    assert lines.events(job_id) == ["accepted", "published", "claimed", "checkpointed"]
    published, checkpointed = lines.of(job_id)[1], lines.of(job_id)[3]
    assert (published["tenant"], published["kind"]) == ("acme", "noop")
    assert (checkpointed["epoch"], checkpointed["attempt"]) == (1, 1)
    assert SECRET not in lines.text


def test_every_event_of_a_traced_job_carries_its_trace_id(
    engine: Engine, clock: FakeClock, lines: Lines
) -> None:
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    job_id = job(engine, traceparent=f"00-{trace_id}-00f067aa0ba902b7-01")
    publish_due(engine)
    held = claimed(engine, job_id)
    db.transact(engine, fenced.save_checkpoint, job_id, held.epoch, {"at": 1}, clock.now())
    assert fail(engine, clock, held, permanent=False) is State.QUEUED
    clock.advance(1)  # past the retry's backoff
    assert complete(engine, clock, claimed(engine, job_id)) == [State.SUCCEEDED]

    assert lines.events(job_id) == [
        "accepted", "published", "claimed", "checkpointed", "requeued", "claimed", "succeeded",
    ]  # fmt: skip
    assert {line["trace_id"] for line in lines.of(job_id)} == {trace_id}


def test_nothing_is_logged_for_a_write_that_rolled_back_or_was_refused(
    engine: Engine, clock: FakeClock, lines: Lines
) -> None:
    def accept_then_fail(conn: Connection) -> None:
        add_job(conn, "rolled-back", payload={})
        raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        db.transact(engine, accept_then_fail)
    job_id = job(engine)
    held = claimed(engine, job_id)
    clock.advance(LEASE)  # the lease ran out: the completion is fenced off
    with pytest.raises(Fenced):
        db.transact(engine, fenced.complete, job_id, held.epoch, held.attempt_id, {}, clock.now())
    assert complete(engine, clock, held) == [None]

    assert [line["event"] for line in lines.all()] == ["accepted", "claimed"]

"""A kind's snooze as the store writes it, on each store: one write under the fence that queues the job due
later, gives its attempt back, counts the snooze and adds the outbox row that announces it then; a snooze past
MAX_SNOOZES is a failed attempt, one with a cancel waiting ends the job; and a kind's own backoff sets its
retries' wait. (Every fenced-out case of the snooze, stale epoch included: test_store_fencing.py.)"""

from __future__ import annotations

import logging

import pytest
from pydantic import BaseModel
from sqlalchemy import Engine

import outbox_bridge
from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import db, fenced, operator, queries
from outbox_bridge.jobstore.decisions import SNOOZED_TOO_OFTEN, Decision
from outbox_bridge.jobstore.errors import Fenced
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.states import State
from outbox_bridge.telemetry import logs
from outbox_bridge.worker.attempt import AttemptOutcome
from outbox_bridge.worker.commit import commit_outcomes
from tests.support.store import LEASE, claimed, every_row, job_row, new_job

BACKOFF = Backoff(base=5.0, cap=5.0)


class Nothing(BaseModel):
    pass


@outbox_bridge.kind("store_snooze_own_backoff", payload=Nothing, backoff=(300.0, 400.0))
def own_backoff(ctx: outbox_bridge.JobContext, payload: Nothing) -> None:
    raise outbox_bridge.TransientError("flaky", "try again")


def snooze(engine: Engine, held: Claim, now: float, seconds: float = 120.0, most: int = 100) -> Decision:
    return db.transact(
        engine, fenced.snooze, held.job_id, held.epoch, held.attempt_id,
        seconds=seconds, now=now, max_snoozes=most, backoff=BACKOFF,
    )  # fmt: skip


def outbox_due_times(engine: Engine, job_id: str) -> list[float]:
    return sorted(row["available_at"] for row in every_row(engine)["outbox"] if row["job_id"] == job_id)


def test_a_snooze_queues_the_job_due_later_and_gives_its_attempt_back(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = new_job(engine, max_attempts=1)
    held = claimed(engine, job_id)
    now = clock.now()
    before = outbox_due_times(engine, job_id)

    decision = snooze(engine, held, now, seconds=120.0)

    assert (decision.state, decision.retry_in, decision.refund) == (State.QUEUED, 120.0, True)
    job = job_row(engine, job_id)
    assert (job.state, job.available_at, job.attempts, job.snoozes) == (State.QUEUED, now + 120.0, 0, 1)
    assert (job.lease_owner, job.lease_expires_at, job.error_code, job.finished_at) == (
        None,
        None,
        None,
        None,
    )
    [attempt] = db.read(engine, queries.attempts_of, job_id)
    assert (attempt.outcome, attempt.ended_at, attempt.error_code) == ("snoozed", now, None)
    assert outbox_due_times(engine, job_id) == sorted([*before, now + 120.0])
    # Its one attempt of the budget is still there once the snooze is over.
    clock.advance(120.0)
    again = claimed(engine, job_id, "w2")
    assert (again.epoch, again.attempts) == (held.epoch + 1, 1)


def test_a_snooze_is_logged_as_a_snoozed_event_once_committed(
    engine: Engine, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = new_job(engine)
    held = claimed(engine, job_id)
    with caplog.at_level(logging.INFO, logger=logs.EVENTS.name):
        snooze(engine, held, clock.now(), seconds=90.0)
    [event] = [
        r for r in caplog.records if r.name == logs.EVENTS.name and getattr(r, "job_id", None) == job_id
    ]
    fields = {name: getattr(event, name, None) for name in ("event", "epoch", "attempt", "seconds")}
    assert fields == {"event": "snoozed", "epoch": held.epoch, "attempt": 0, "seconds": 90.0}


def test_a_snooze_past_max_snoozes_is_a_failed_attempt_within_the_budget(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = new_job(engine, max_attempts=2)
    assert snooze(engine, claimed(engine, job_id), clock.now(), seconds=10.0, most=1).refund
    clock.advance(10.0)

    decision = snooze(engine, claimed(engine, job_id), clock.now(), seconds=10.0, most=1)
    assert (decision.state, decision.error_code, decision.refund) == (State.QUEUED, SNOOZED_TOO_OFTEN, False)
    job = job_row(engine, job_id)
    assert (job.attempts, job.snoozes, job.error_code) == (1, 1, SNOOZED_TOO_OFTEN)
    assert clock.now() + 2.5 <= job.available_at <= clock.now() + 5.0  # the backoff, not the snooze
    clock.set(job.available_at)

    last = snooze(engine, claimed(engine, job_id), clock.now(), seconds=10.0, most=1)
    assert (last.state, last.error_code) == (State.DEAD, "attempts_exhausted")
    attempts = db.read(engine, queries.attempts_of, job_id)
    assert [(a.outcome, a.error_code) for a in attempts] == [
        ("snoozed", None),
        ("retry", SNOOZED_TOO_OFTEN),
        ("dead", SNOOZED_TOO_OFTEN),
    ]


def test_max_snoozes_zero_makes_every_snooze_a_failure(engine: Engine, clock: FakeClock) -> None:
    job_id = new_job(engine, max_attempts=1)
    decision = snooze(engine, claimed(engine, job_id), clock.now(), most=0)
    assert (decision.state, job_row(engine, job_id).snoozes) == (State.DEAD, 0)


def test_a_snooze_with_a_cancel_request_waiting_ends_the_job_cancelled(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = new_job(engine)
    held = claimed(engine, job_id)
    db.transact(engine, operator.request_cancel, job_id, clock.now())

    assert snooze(engine, held, clock.now()).state is State.CANCELLED
    job = job_row(engine, job_id)
    assert (job.state, job.snoozes, job.error_code) == (State.CANCELLED, 0, "cancelled")
    [attempt] = db.read(engine, queries.attempts_of, job_id)
    assert attempt.outcome == "cancelled"


def test_a_snooze_from_a_stale_epoch_writes_nothing(engine: Engine, clock: FakeClock) -> None:
    job_id = new_job(engine)
    old = claimed(engine, job_id, "w1")
    clock.advance(LEASE + 1)
    assert claimed(engine, job_id, "w2").epoch == old.epoch + 1
    before = every_row(engine)

    with pytest.raises(Fenced):
        snooze(engine, old, clock.now())
    assert every_row(engine) == before


def test_the_worker_commit_writes_a_snooze_and_a_kinds_own_backoff(engine: Engine, clock: FakeClock) -> None:
    snoozing = claimed(engine, new_job(engine, "a"))
    failing = claimed(engine, new_job(engine, "b", kind="store_snooze_own_backoff"))
    plain = claimed(engine, new_job(engine, "c"))
    error = outbox_bridge.TransientError("flaky", "try again")
    outcomes = [
        (snoozing, AttemptOutcome(snooze=60.0)),
        (failing, AttemptOutcome(error=error)),
        (plain, AttemptOutcome(error=error)),
    ]
    now = clock.now()

    states = db.transact(engine, commit_outcomes, outcomes, now, BACKOFF, max_snoozes=5)

    assert states == [State.QUEUED] * 3
    assert job_row(engine, snoozing.job_id).available_at == now + 60.0
    # The kind's backoff (300, 400): its first retry waits between half and all of 300 s.
    assert now + 150.0 <= job_row(engine, failing.job_id).available_at <= now + 300.0
    # A kind without one waits as the settings say (here 5 s).
    assert now + 2.5 <= job_row(engine, plain.job_id).available_at <= now + 5.0

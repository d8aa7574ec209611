"""Every worker write is fenced: a stale epoch, an expired lease, a passed deadline or a job that is no longer
running gets `Fenced`, and nothing at all is written.

Each refused write runs in a transaction that catches `Fenced` and commits, so the comparison of every row
before and after shows what the guard itself wrote (nothing), not what a rollback undid."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Connection, Engine

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import db, fenced
from outbox_bridge.jobstore.errors import Fenced
from outbox_bridge.jobstore.records import Claim
from tests.support.store import LEASE, claimed, every_row, new_job

BACKOFF = Backoff(base=5.0, cap=60.0)

WorkerWrite = Callable[[Connection, Claim, float], object]


def _fail(permanent: bool) -> WorkerWrite:
    def write(conn: Connection, c: Claim, now: float) -> object:
        return fenced.fail(
            conn,
            c.job_id,
            c.epoch,
            c.attempt_id,
            code="boom",
            message="late failure",
            permanent=permanent,
            now=now,
            backoff=BACKOFF,
        )

    return write


WRITES: dict[str, WorkerWrite] = {
    "renew_lease": lambda conn, c, now: fenced.renew_lease(conn, c.job_id, c.epoch, now, LEASE),
    "mark_external_started": lambda conn, c, now: fenced.mark_external_started(
        conn, c.job_id, c.epoch, c.attempt_id, now
    ),
    "save_checkpoint": lambda conn, c, now: fenced.save_checkpoint(conn, c.job_id, c.epoch, {"step": 9}, now),
    "complete": lambda conn, c, now: fenced.complete(conn, c.job_id, c.epoch, c.attempt_id, {"late": 1}, now),
    "fail_transient": _fail(permanent=False),
    "fail_permanent": _fail(permanent=True),
    "release": lambda conn, c, now: fenced.release(conn, c.job_id, c.epoch, c.attempt_id, now),
    "snooze": lambda conn, c, now: fenced.snooze(
        conn, c.job_id, c.epoch, c.attempt_id, seconds=60.0, now=now, max_snoozes=100, backoff=BACKOFF
    ),
}


def stale_epoch(engine: Engine, clock: FakeClock) -> Claim:
    """w1's lease ran out and w2 took the job over: w1 still holds epoch 1, the job is at epoch 2."""
    job_id = new_job(engine)
    old = claimed(engine, job_id, "w1")
    clock.advance(LEASE + 1)
    assert claimed(engine, job_id, "w2").epoch == old.epoch + 1
    return old


def expired_lease(engine: Engine, clock: FakeClock) -> Claim:
    """The lease ends exactly now; nobody else has claimed the job yet."""
    held = claimed(engine, new_job(engine), "w1")
    clock.set(held.lease_expires_at)
    return held


def passed_deadline(engine: Engine, clock: FakeClock) -> Claim:
    """The lease is still alive but the job's deadline has passed."""
    held = claimed(engine, new_job(engine, deadline=10), "w1")
    clock.advance(10)
    assert clock.now() < held.lease_expires_at
    return held


def finished(engine: Engine, clock: FakeClock) -> Claim:
    """The worker already completed the job and writes again (same epoch, lease cleared)."""
    held = claimed(engine, new_job(engine), "w1")
    db.transact(engine, fenced.complete, held.job_id, held.epoch, held.attempt_id, {"done": 1}, clock.now())
    return held


def released(engine: Engine, clock: FakeClock) -> Claim:
    """The worker gave the job back: queued again at the same epoch, not claimed by anyone yet."""
    held = claimed(engine, new_job(engine), "w1")
    db.transact(engine, fenced.release, held.job_id, held.epoch, held.attempt_id, clock.now())
    return held


LOST: dict[str, Callable[[Engine, FakeClock], Claim]] = {
    "stale_epoch": stale_epoch,
    "expired_lease": expired_lease,
    "passed_deadline": passed_deadline,
    "no_longer_running_finished": finished,
    "no_longer_running_released": released,
}


def write_and_commit_if_fenced(conn: Connection, write: WorkerWrite, held: Claim, now: float) -> str:
    try:
        write(conn, held, now)
    except Fenced as fenced:
        assert (fenced.job_id, fenced.epoch) == (held.job_id, held.epoch)
        return "fenced"
    return "written"


@pytest.mark.parametrize("lost", list(LOST))
@pytest.mark.parametrize("write", list(WRITES))
def test_a_worker_write_that_lost_its_fence_is_refused_and_writes_nothing(
    engine: Engine, clock: FakeClock, write: str, lost: str
) -> None:
    held = LOST[lost](engine, clock)
    before = every_row(engine)
    outcome = db.transact(engine, write_and_commit_if_fenced, WRITES[write], held, clock.now())
    assert outcome == "fenced"
    assert every_row(engine) == before


@pytest.mark.parametrize("write", list(WRITES))
def test_a_worker_write_just_before_the_lease_ends_is_accepted(
    engine: Engine, clock: FakeClock, write: str
) -> None:
    held = claimed(engine, new_job(engine), "w1")
    clock.set(held.lease_expires_at - 0.001)
    assert db.transact(engine, write_and_commit_if_fenced, WRITES[write], held, clock.now()) == "written"

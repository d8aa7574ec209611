"""Delayed jobs in the store: a job accepted with a start is neither claimed (from a delivery or by the
table's poll) nor leased by a relay before it, and is both once it comes due; a relay that leased all that
was due learns when the next row comes due."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import claiming, db, intake, outbox
from outbox_bridge.jobstore.claiming import Refusal
from outbox_bridge.jobstore.schedule import Schedule
from tests.support.store import due_rows, job_row

LEASE = 30.0


def delayed(engine: Engine, clock: FakeClock, key: str, seconds: float) -> str:
    accepted = db.transact(
        engine,
        intake.accept,
        tenant="acme",
        owner="alice",
        kind="noop",
        payload={},
        operation_key=key,
        now=clock.now(),
        max_attempts=3,
        schedule=Schedule(delay_seconds=seconds),
    )
    return accepted.job.id


def test_a_delayed_job_is_not_claimed_from_the_table_before_its_start(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = delayed(engine, clock, "later", 10)
    start = clock.now() + 10
    assert job_row(engine, job_id).run_at == start

    clock.set(start - 0.001)
    assert db.transact(engine, claiming.claim_due, "w1", clock.now(), LEASE, 10) == []
    clock.set(start)
    [taken] = db.transact(engine, claiming.claim_due, "w1", clock.now(), LEASE, 10)
    assert taken.job_id == job_id


def test_a_delivery_of_a_delayed_job_before_its_start_is_refused_as_not_yet_available(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = delayed(engine, clock, "later", 10)
    early = db.transact(engine, claiming.claim, job_id, "w1", clock.now() + 9.999, LEASE)
    assert (early.claim, early.refusal) == (None, Refusal.NOT_AVAILABLE)
    due = db.transact(engine, claiming.claim, job_id, "w1", clock.now() + 10, LEASE)
    assert due.claim is not None and due.claim.job_id == job_id


def test_a_job_due_sooner_is_claimed_first_even_when_accepted_later(engine: Engine, clock: FakeClock) -> None:
    late = delayed(engine, clock, "late", 20)
    soon = delayed(engine, clock, "soon", 5)
    clock.advance(20)
    taken = db.transact(engine, claiming.claim_due, "w1", clock.now(), LEASE, 1)
    assert [claim.job_id for claim in taken] == [soon]
    assert late != soon


def test_a_relay_reads_a_delayed_row_only_once_it_is_due_and_knows_when_that_is(
    engine: Engine, clock: FakeClock
) -> None:
    delayed(engine, clock, "later", 10)
    start = clock.now() + 10
    assert db.read(engine, outbox.earliest_unpublished) == start
    assert due_rows(engine, now=start - 0.001).rows == ()
    assert db.read(engine, outbox.next_due, start - 0.001) == start
    assert db.read(engine, outbox.next_due, start) is None
    assert len(due_rows(engine, now=start).rows) == 1


@pytest.mark.parametrize("seconds", [0.0, 2.5])
def test_a_delay_of_zero_is_due_at_once_and_remembered_as_asked(
    engine: Engine, clock: FakeClock, seconds: float
) -> None:
    job = job_row(engine, delayed(engine, clock, "k", seconds))
    assert (job.available_at, job.run_at) == (clock.now() + seconds, clock.now() + seconds)

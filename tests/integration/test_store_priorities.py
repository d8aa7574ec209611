"""The orders the store hands work out in, on both stores: the relay role's read (`leader.due`) and the
table's claim (`claiming.claim_due`, the baseline's). A `high` job queued behind a backlog of `normal` ones
goes first, a `low` one last; among jobs of one priority, tenants take turns, then the oldest goes first."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Connection, Engine, update

from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import claiming, db, tenantcap
from outbox_bridge.jobstore.priorities import Priority
from outbox_bridge.jobstore.schema import jobs
from outbox_bridge.jobstore.schema import outbox as outbox_table
from tests.support.store import LEASE, due_rows, new_job, new_jobs, publish

BACKLOG = 200
BATCH = 50

# One take of up to `limit` jobs, by job id, in the order it hands them out.
Take = Callable[[Engine, FakeClock, int], list[str]]


def relay_read(engine: Engine, clock: FakeClock, limit: int) -> list[str]:
    """The relay role's read, then its mark of what it published (the rows are due no more)."""
    rows = due_rows(engine, now=clock.now(), limit=limit).rows
    publish(engine, [row_id for row_id, _ in rows], now=clock.now())
    return [job_id for _, job_id in rows]


def claim(engine: Engine, clock: FakeClock, limit: int) -> list[str]:
    claims = db.transact(engine, claiming.claim_due, "w1", clock.now(), LEASE, limit)
    return [c.job_id for c in claims]


TAKES = pytest.mark.parametrize("take", [relay_read, claim], ids=["relay-read", "baseline-claim"])


def take_all(take: Take, engine: Engine, clock: FakeClock) -> list[str]:
    taken: list[str] = []
    while batch := take(engine, clock, BATCH):
        taken += batch
    return taken


@TAKES
def test_a_high_job_behind_a_normal_backlog_goes_first_and_a_low_one_last(
    engine: Engine, clock: FakeClock, take: Take
) -> None:
    backlog = new_jobs(engine, BACKLOG)
    clock.advance(1)
    low = new_job(engine, "low", priority=Priority.LOW)
    clock.advance(1)
    high = new_job(engine, "high", priority=Priority.HIGH)
    clock.advance(1)

    taken = take_all(take, engine, clock)

    assert taken[0] == high
    assert taken[-1] == low
    assert sorted(taken[1:-1]) == sorted(backlog)


@TAKES
def test_a_high_job_that_is_not_due_yet_waits_for_its_time(
    engine: Engine, clock: FakeClock, take: Take
) -> None:
    new_jobs(engine, BACKLOG)
    later = new_job(engine, "later", priority=Priority.HIGH)
    db.transact(engine, delay, later, clock.now() + 10)
    clock.advance(1)

    assert later not in take_all(take, engine, clock)
    clock.advance(10)  # within the leases the takes above hold
    assert take(engine, clock, BATCH) == [later]


def delay(conn: Connection, job_id: str, until: float) -> None:
    conn.execute(update(jobs).where(jobs.c.id == job_id).values(available_at=until))
    conn.execute(update(outbox_table).where(outbox_table.c.job_id == job_id).values(available_at=until))


@TAKES
def test_tenants_take_turns_before_age_within_a_priority(
    engine: Engine, clock: FakeClock, take: Take
) -> None:
    heavy = new_jobs(engine, BACKLOG, tenant="heavy")
    clock.advance(1)
    light = []
    for n in range(3):
        light.append(new_job(engine, f"light-{n}", tenant="light"))
        clock.advance(1)
    urgent = new_job(engine, "urgent", tenant="heavy", priority=Priority.HIGH)
    clock.advance(1)

    first = take(engine, clock, 10)

    tenant_of = {job_id: "heavy" for job_id in heavy} | {job_id: "light" for job_id in light}
    assert first[0] == urgent, "priority before turns"
    assert [tenant_of[job_id] for job_id in first[1:7]] == ["heavy", "light"] * 3
    assert [job_id for job_id in first[1:] if tenant_of[job_id] == "light"] == light, "oldest first"
    assert set(first[7:]) <= set(heavy)


@TAKES
def test_without_a_backlog_everything_due_is_taken_in_one_go(
    engine: Engine, clock: FakeClock, take: Take
) -> None:
    ids = new_jobs(engine, 5, tenant="a") + new_jobs(engine, 5, tenant="b")
    clock.advance(1)
    assert sorted(take(engine, clock, BATCH)) == sorted(ids)
    assert take(engine, clock, BATCH) == []


@TAKES
def test_a_take_of_one_gives_a_tenant_that_runs_nothing_its_turn_before_an_older_backlog(
    engine: Engine, clock: FakeClock, take: Take
) -> None:
    heavy = new_jobs(engine, BACKLOG, tenant="heavy")
    clock.advance(1)
    light = new_job(engine, "light", tenant="light")
    clock.advance(1)
    db.transact(engine, claiming.claim_many, heavy[-1:], "elsewhere", clock.now(), LEASE)  # heavy runs one

    assert take(engine, clock, 1) == [light]


def test_a_claim_of_one_behind_a_one_tenant_backlog_takes_exactly_one(
    engine: Engine, clock: FakeClock
) -> None:
    new_jobs(engine, BACKLOG)
    clock.advance(1)
    assert len(claim(engine, clock, 1)) == 1
    assert db.read(engine, tenantcap.running) == {"acme": 1}

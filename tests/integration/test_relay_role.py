"""The relay role: one token holds it until it expires; its holder reads the due rows without a write lock
(on PostgreSQL without locking a row, in one statement that agrees with the general read), and marks or
holds back rows only while it holds the role."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Engine, select

from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import db, leader, outbox
from outbox_bridge.jobstore.schema import outbox as outbox_table
from tests.integration.test_outbox import add_row, rows
from tests.support.store import new_job

ROLE = 5.0


def take(engine: Engine, clock: FakeClock, token: str, gone: str | None = None) -> bool:
    return db.transact(engine, leader.take, token, now=clock.now(), seconds=ROLE, gone=gone)


def due(
    engine: Engine, clock: FakeClock, token: str, limit: int = 100, exclude: frozenset[int] = frozenset()
) -> tuple[outbox.Lease, float | None]:
    read = db.read(engine, leader.due, token, now=clock.now(), limit=limit, exclude=exclude)
    # The relay's read on PostgreSQL: one statement, on its own (both drivers hold it).
    at_once = db.read_one(engine, leader.due_at_once, token, now=clock.now(), limit=limit, exclude=exclude)
    assert at_once == read, "the one-statement read disagrees with the general one"
    return read


@contextmanager
def writer_holding_the_outbox(engine: Engine) -> Iterator[None]:
    """Another writer inside its transaction: on SQLite holding the write lock, on PostgreSQL every outbox
    row locked (a lease's walk, `FOR UPDATE SKIP LOCKED`, would skip them all)."""
    if engine.dialect.name == "sqlite":
        writer = sqlite3.connect(engine.url.database or "", timeout=0)
        writer.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            writer.rollback()
            writer.close()
        return
    with engine.connect() as conn, conn.begin() as transaction:
        conn.execute(select(outbox_table.c.id).with_for_update())
        yield
        transaction.rollback()


def test_one_token_holds_the_role_until_it_expires_or_is_handed_back(
    engine: Engine, clock: FakeClock
) -> None:
    assert db.read(engine, leader.current) is None
    assert take(engine, clock, "a")
    assert not take(engine, clock, "b"), "taken while another holds it"
    clock.advance(ROLE - 1)
    assert take(engine, clock, "a"), "its holder renews it"
    clock.advance(ROLE - 1)
    assert not take(engine, clock, "b"), "the renewal counts from when it was renewed"
    clock.advance(1.5)
    assert take(engine, clock, "b"), "an expired role is anyone's"
    held = db.read(engine, leader.current)
    assert held is not None and held.token == "b" and held.holder == leader.me()
    assert not take(engine, clock, "a"), "the old holder's token no longer renews it"
    db.transact(engine, leader.give_up, "b")
    assert take(engine, clock, "c"), "a role handed back is taken at once"
    assert take(engine, clock, "d", gone="c"), "so is one whose holder was seen gone"
    assert not take(engine, clock, "e", gone="c"), "but only the gone holder's"


def test_a_holder_seen_gone_is_one_whose_process_is_not_running_here() -> None:
    alive = leader.Holder("t", leader.me(), 0.0)
    assert not alive.gone()
    host = leader.me().rpartition(":")[0]
    assert leader.Holder("t", f"{host}:{2**22 + 12345}", 0.0).gone()  # above Linux's pid_max
    assert not leader.Holder("t", f"elsewhere.example:{2**22 + 12345}", 0.0).gone(), "another host's"


def test_the_holder_reads_due_rows_in_their_order_leaving_out_its_own_without_a_write_lock(
    engine: Engine, clock: FakeClock, tmp_path_factory: pytest.TempPathFactory
) -> None:
    job_ids = []
    for key in ("a", "b", "c"):
        job_ids.append(new_job(engine, key))
        clock.advance(1)
    later = new_job(engine, "later")
    db.transact(engine, outbox.drop_pending, later)
    add_row(engine, clock, later, due_in=60)
    assert take(engine, clock, "role")
    # Another writer holds SQLite's write lock, or PostgreSQL's row locks, all along: the read does not wait
    # for it, nor skip what it holds.
    with writer_holding_the_outbox(engine):
        first, next_due = due(engine, clock, "role", limit=2)
        assert first.token == "role"
        assert [job for _, job in first.rows] == job_ids[:2]
        assert next_due is None, "a full read says nothing of what comes due later"
        rest, next_due = due(engine, clock, "role", exclude=frozenset(i for i, _ in first.rows))
        assert [job for _, job in rest.rows] == job_ids[2:]
        assert next_due == pytest.approx(clock.now() + 60)
        assert set(rest.orders.values()) == {(1, "acme")}  # (priority, tenant), for the consumer
    assert all(r["published_at"] is None and r["publish_attempts"] == 0 for r in rows(engine)), "a read wrote"


def test_a_read_behind_a_backlog_of_several_tenants_gives_each_tenant_its_turn(
    engine: Engine, clock: FakeClock
) -> None:
    first_tenants = [new_job(engine, f"a{n}", tenant="a") for n in range(3)]
    other = new_job(engine, "b0", tenant="b")
    assert take(engine, clock, "role")
    # The one statement leaves this read to the ranking.
    assert db.read_one(engine, leader.due_at_once, "role", now=clock.now(), limit=2) is None
    read, _ = db.read(engine, leader.due, "role", now=clock.now(), limit=2)
    assert [job for _, job in read.rows] == [first_tenants[0], other], (
        "b's first row waits behind a's first only"
    )


def test_marks_and_hold_backs_change_rows_only_while_the_token_holds_the_role(
    engine: Engine, clock: FakeClock
) -> None:
    for key in ("a", "b", "c"):
        new_job(engine, key)
    assert take(engine, clock, "role")
    read, _ = due(engine, clock, "role")
    (a, _), (b, _), (c, _) = read.rows
    assert db.transact(engine, leader.mark_published, "role", [a], clock.now()) == 1
    retry_at = clock.now() + 1.0
    assert db.transact(engine, leader.hold_back, "role", [b], now=clock.now(), retry_at=retry_at) == 1
    by_id = {r["id"]: r for r in rows(engine)}
    assert by_id[a]["published_at"] == clock.now() and by_id[a]["publish_attempts"] == 1
    assert by_id[b]["published_at"] is None and by_id[b]["available_at"] == retry_at
    assert by_id[b]["publish_attempts"] == 1
    assert [i for i, _ in due(engine, clock, "role")[0].rows] == [c], "a held-back row waits its retry"
    clock.advance(1.0)
    assert [i for i, _ in due(engine, clock, "role")[0].rows] == [b, c]
    assert db.transact(engine, leader.mark_published, "role", [a], clock.now()) == 0, "marked once"


def test_a_holder_whose_role_passed_on_marks_and_holds_back_nothing(engine: Engine, clock: FakeClock) -> None:
    for key in ("a", "b"):
        new_job(engine, key)
    assert take(engine, clock, "old")
    read, _ = due(engine, clock, "old")
    (a, _), (b, _) = read.rows
    clock.advance(ROLE + 1)  # the old holder stalled past its role
    assert db.transact(engine, leader.mark_published, "old", [a], clock.now()) == 0, "expired"
    assert take(engine, clock, "new")
    assert db.transact(engine, leader.mark_published, "old", [a], clock.now()) == 0, "taken over"
    assert db.transact(engine, leader.hold_back, "old", [b], now=clock.now(), retry_at=clock.now() + 9) == 0
    before = rows(engine)
    assert all(r["published_at"] is None and r["publish_attempts"] == 0 for r in before)
    # The new holder finds both rows due and marks them.
    taken, _ = due(engine, clock, "new")
    assert [i for i, _ in taken.rows] == [a, b]
    assert db.transact(engine, leader.mark_published, "new", [a, b], clock.now()) == 2

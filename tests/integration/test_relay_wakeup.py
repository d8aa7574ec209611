"""Relays woken by commits (relay/wake.py; jobstore/drivers/sqlite/notify_sockets.py, and
jobstore/drivers/postgresql/listener.py on
PostgreSQL) on a real store and a real RabbitMQ: a committed job is published without waiting for a poll, a
row announced for later is published when it comes due (also one no notification announced to this relay,
and one notified while a sooner one's timer was set: a lease that drains the due rows asks when the next
comes due), and an idle relay with a notify socket barely reads the store. Also SQLite's notify socket
itself: the earliest of several notifications, none for a rolled-back transaction, and a killed relay's
socket skipped and removed."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, select

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, intake, outbox, queries
from outbox_bridge.jobstore.drivers.sqlite import notify_sockets
from outbox_bridge.jobstore.schedule import Schedule
from outbox_bridge.jobstore.schema import outbox as outbox_table
from outbox_bridge.relay.schedules import CHECK_SECONDS
from tests.conftest import make_settings
from tests.support.procs import wait_for
from tests.support.relay_harness import Broker, running_relay, unpublished
from tests.support.store import new_job

POLL = 5.0  # so long that only a notification can explain a quick publish


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str) -> Settings:
    return make_settings(
        tmp_path, rabbitmq_url=rabbitmq_url, relay_poll_seconds=POLL, sweep_interval_seconds=60.0
    )


@pytest.fixture
def broker(settings: Settings, rabbitmq_url: str) -> Iterator[Broker]:
    broker = Broker(rabbitmq_url, settings)
    yield broker
    broker.cleanup()


def idle_relay_settled() -> None:
    """Give a relay that just connected time to find the outbox empty and fall back to its poll."""
    time.sleep(0.5)


@pytest.mark.broker
def test_a_committed_job_is_published_at_once_not_at_the_next_poll(
    settings: Settings, engine: Engine, broker: Broker
) -> None:
    with running_relay(settings, engine) as relay:
        wait_for(lambda: relay.connected, 15, what="relay connected")
        idle_relay_settled()
        started = time.monotonic()
        new_job(engine, "notified")
        wait_for(lambda: unpublished(engine) == 0, 15, interval=0.005, what="the job published")
        took = time.monotonic() - started
    assert took < POLL / 2, f"published after {took:.2f}s: the relay waited for its poll"
    assert len(broker.take_all(quiet_seconds=0.5)) == 1


@pytest.mark.broker
def test_a_row_announced_for_later_is_published_when_it_comes_due(
    settings: Settings, engine: Engine, broker: Broker
) -> None:
    job_id = new_job(engine, "later")
    with running_relay(settings, engine) as relay:
        wait_for(lambda: unpublished(engine) == 0, 15, what="the first row published")
        idle_relay_settled()
        due = clock.now() + 1.0
        db.transact(engine, lambda conn: outbox.add(conn, job_id, available_at=due, now=clock.now()))
        time.sleep(0.6)
        assert unpublished(engine) == 1, "published before it came due"
        wait_for(lambda: unpublished(engine) == 0, POLL / 2, interval=0.01, what="the due row published")
        wait_for(lambda: relay.counts.marked == 2, 5, what="the relay counted both rows")
    assert clock.now() >= due
    assert len(broker.take_all(quiet_seconds=0.5)) == 2


@pytest.mark.broker
@pytest.mark.databases("sqlite")
def test_an_idle_relay_with_a_notify_socket_reads_the_store_about_once_a_second(
    tmp_path: Path, rabbitmq_url: str, engine: Engine, broker: Broker
) -> None:
    eager = make_settings(
        tmp_path, rabbitmq_url=rabbitmq_url, relay_poll_seconds=0.02, sweep_interval_seconds=60.0
    )
    broker.settings = eager
    with running_relay(eager, engine) as relay:
        wait_for(lambda: relay.connected, 15, what="relay connected")
        # Taking the role writes it, and the scheduler's next look (within CHECK_SECONDS) brings in the
        # declared schedules, once: not an idle relay's reads.
        wait_for(relay.leadership.is_leader, 15, what="relay leads")
        idle_relay_settled()
        time.sleep(CHECK_SECONDS)
        before = db.stats.snapshot()["statements"]
        time.sleep(3.0)
        statements = db.stats.snapshot()["statements"] - before
    # A poll every 20 ms would be some 150 reads. With a notify socket, three reads a second at most: the
    # fallback poll of the outbox, and, for the relay role's holder, its looks for due schedule slots
    # (`relay.schedules.CHECK_SECONDS`) and due webhook deliveries (WEBHOOK_POLL_SECONDS), once a second each;
    # and the role's renewals (`relay.leader`), one or two in the window, two statements each.
    assert statements <= 22


@pytest.mark.databases("sqlite")
def test_a_notify_socket_reports_the_earliest_of_several_notifications(tmp_path: Path) -> None:
    notify_socket = notify_sockets.NotifySocket.open(tmp_path / "relays")
    assert notify_socket is not None
    try:
        assert notify_socket.take() is None
        notifier = notify_sockets.Notifier(tmp_path / "relays")
        for due in (30.0, 10.0, 20.0):
            notifier.notify(due)
        assert notify_socket.take() == 10.0
        assert notify_socket.take() is None
    finally:
        notify_socket.close()
    assert os.listdir(tmp_path / "relays") == []


@pytest.mark.databases("sqlite")
def test_a_commit_that_adds_outbox_rows_notifies_and_a_rolled_back_one_does_not(
    settings: Settings, engine: Engine
) -> None:
    database = db.sqlite_path(settings)
    assert database is not None
    notify_socket = notify_sockets.NotifySocket.open(notify_sockets.directory_for(database))
    assert notify_socket is not None
    try:
        job_id = new_job(engine, "notifies")
        assert notify_socket.take() is not None

        def add_then_fail(conn: Connection) -> None:
            outbox.add(conn, job_id, available_at=clock.now(), now=clock.now())
            raise RuntimeError("rolled back")

        with pytest.raises(RuntimeError):
            db.transact(engine, add_then_fail)
        db.transact(engine, lambda conn: queries.get_job(conn, job_id))
        assert notify_socket.take() is None, "a rolled-back or rowless transaction notified"
    finally:
        notify_socket.close()


@pytest.mark.databases("sqlite")
def test_a_killed_relays_notify_socket_is_skipped_and_removed_by_the_next_relay(tmp_path: Path) -> None:
    directory = tmp_path / "relays"
    directory.mkdir()
    left = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    left.bind(str(directory / "relay-999999999"))
    left.close()  # the socket file stays, with nobody listening: as a SIGKILLed relay leaves it
    notify_sockets.Notifier(directory).notify(1.0)  # refused, and not an error
    notify_socket = notify_sockets.NotifySocket.open(directory)
    assert notify_socket is not None
    try:
        assert os.listdir(directory) == [f"relay-{os.getpid()}"]
    finally:
        notify_socket.close()


def published_at(engine: Engine, job_id: str) -> float | None:
    rows = db.read(
        engine,
        lambda conn: (
            conn.execute(select(outbox_table.c.published_at).where(outbox_table.c.job_id == job_id))
            .scalars()
            .all()
        ),
    )
    return rows[0] if rows and rows[0] is not None else None


def delayed_job(engine: Engine, key: str, seconds: float) -> tuple[str, float]:
    """A job accepted now with a start `seconds` ahead: its id and its start."""
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
    assert accepted.job.run_at is not None
    return accepted.job.id, accepted.job.run_at


@pytest.mark.broker
def test_a_relay_started_after_a_delayed_job_was_committed_publishes_it_when_it_comes_due(
    settings: Settings, engine: Engine, broker: Broker
) -> None:
    job_id, start = delayed_job(engine, "delayed", 1.5)
    with running_relay(settings, engine) as relay:
        wait_for(lambda: relay.connected, 15, what="relay connected")
        wait_for(lambda: published_at(engine, job_id) is not None, POLL, interval=0.01, what="published")
    at = published_at(engine, job_id)
    assert at is not None
    # Marked published after its confirm and the settle delay; only the poll would make it POLL late.
    assert start <= at < start + POLL / 2, f"published {at - start:+.2f}s from its start: not its timer"


@pytest.mark.broker
def test_a_later_delayed_job_notified_while_a_sooner_one_waits_is_published_at_its_own_time(
    settings: Settings, engine: Engine, broker: Broker
) -> None:
    with running_relay(settings, engine) as relay:
        wait_for(lambda: relay.connected, 15, what="relay connected")
        idle_relay_settled()
        soon, soon_start = delayed_job(engine, "soon", 1.0)
        late, late_start = delayed_job(engine, "late", 2.0)
        wait_for(lambda: published_at(engine, late) is not None, POLL, interval=0.01, what="both published")
    for job_id, start in ((soon, soon_start), (late, late_start)):
        at = published_at(engine, job_id)
        assert at is not None
        assert start <= at < start + POLL / 2, f"published {at - start:+.2f}s from its start"
    assert len(broker.take_all(quiet_seconds=0.5)) == 2

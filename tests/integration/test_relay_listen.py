"""Relays woken by commits on a PostgreSQL store (jobstore/drivers/postgresql/listener.py, relay/wake.py),
against a real
PostgreSQL and a real RabbitMQ: nothing is announced for a rolled-back transaction, and a relay whose
listening connection is cut polls meanwhile and listens again. That a committed job is published at once,
and a row announced for later when it comes due, is shown for both stores in test_relay_wakeup.py."""

from __future__ import annotations

import logging
import select
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, text

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, outbox
from outbox_bridge.jobstore.drivers.postgresql.listener import Listener
from outbox_bridge.relay import wake
from tests.conftest import make_settings
from tests.support.procs import wait_for
from tests.support.relay_harness import Broker, running_relay, unpublished
from tests.support.store import new_job

pytestmark = pytest.mark.databases("postgresql")

POLL = 5.0  # so long that only a notification can explain a quick publish


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str, database_url: str) -> Settings:
    return make_settings(
        tmp_path,
        database_url=database_url,
        rabbitmq_url=rabbitmq_url,
        relay_poll_seconds=POLL,
        sweep_interval_seconds=60.0,
    )


@pytest.fixture
def broker(settings: Settings, rabbitmq_url: str) -> Iterator[Broker]:
    broker = Broker(rabbitmq_url, settings)
    yield broker
    broker.cleanup()


@pytest.fixture
def listener(settings: Settings, engine: Engine) -> Iterator[Listener]:
    opened = Listener.open(settings.database_url)
    assert opened is not None
    yield opened
    opened.close()


def heard(listener: Listener, within: float) -> float | None:
    """What the listener heard within `within` seconds (the earliest due time), or None."""
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        select.select([listener.fileno()], [], [], left)
        due = listener.take()
        if due is not None:
            return due
    return None


def test_a_commit_that_adds_outbox_rows_notifies_and_a_rolled_back_one_does_not(
    engine: Engine, listener: Listener
) -> None:
    before = clock.now()
    job_id = new_job(engine, "notifies")
    due = heard(listener, 5.0)
    assert due is not None and due >= before

    def add_then_fail(conn: Connection) -> None:
        outbox.add(conn, job_id, available_at=clock.now(), now=clock.now())
        raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        db.transact(engine, add_then_fail)
    db.transact(engine, lambda conn: conn.execute(text("SELECT 1")))
    assert heard(listener, 0.5) is None, "a rolled-back or rowless transaction notified"


@pytest.mark.broker
def test_a_relay_whose_listening_connection_is_cut_polls_meanwhile_and_listens_again(
    tmp_path: Path,
    rabbitmq_url: str,
    database_url: str,
    engine: Engine,
    broker: Broker,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(wake, "RELISTEN_SECONDS", 1.0)
    quick = make_settings(
        tmp_path,
        database_url=database_url,
        rabbitmq_url=rabbitmq_url,
        relay_poll_seconds=0.2,
        sweep_interval_seconds=60.0,
    )
    broker.settings = quick
    caplog.set_level(logging.WARNING, logger="outbox_bridge.relay.wake")
    with running_relay(quick, engine) as relay:
        wait_for(lambda: relay.connected, 15, what="relay connected")
        wait_for(lambda: relay.publisher.wakeups.listening, 5, what="the relay listening")
        db.transact(
            engine,
            lambda conn: conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid()"
                )
            ),
        )
        new_job(engine, "while deaf")
        wait_for(lambda: unpublished(engine) == 0, 10, what="the job published by the poll")
        wait_for(lambda: "lost the connection listening" in caplog.text, 10, what="the loss noticed")
        wait_for(lambda: relay.publisher.wakeups.listening, 10, what="the relay listening again")
        new_job(engine, "heard again")
        wait_for(lambda: unpublished(engine) == 0, 10, what="the second job published")
    assert len(broker.take_all(quiet_seconds=0.5)) == 2

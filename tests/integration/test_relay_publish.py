"""The relay against a real RabbitMQ and a real SQLite file: what it publishes, and when it marks rows."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sqlalchemy import Engine

from outbox_bridge.broker.message import CONTENT_TYPE
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from tests.conftest import make_settings
from tests.support.faultproxy import FaultProxy
from tests.support.procs import wait_for
from tests.support.relay_harness import Broker, outbox_rows, running_relay, seed_jobs, unpublished

pytestmark = pytest.mark.broker


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str) -> Settings:
    return make_settings(tmp_path, rabbitmq_url=rabbitmq_url, sweep_interval_seconds=0.2)


@pytest.fixture
def broker(settings: Settings, rabbitmq_url: str) -> Iterator[Broker]:
    broker = Broker(rabbitmq_url, settings)
    yield broker
    broker.cleanup()


def test_each_row_becomes_one_persistent_message_with_its_outbox_id_and_job(
    settings: Settings, engine: Engine, broker: Broker
) -> None:
    job_ids = seed_jobs(engine, 20)
    with running_relay(settings, engine):
        wait_for(lambda: unpublished(engine) == 0, 15, what="all rows published")
    rows = outbox_rows(engine)
    messages = broker.take_all()
    assert sorted(m.message_id or "" for m in messages) == sorted(str(r.id) for r in rows)
    by_id = {str(r.id): r.job_id for r in rows}
    assert all(by_id[m.message_id or ""] == m.job_id for m in messages)
    assert {m.job_id for m in messages} == set(job_ids)
    assert {(m.delivery_mode, m.content_type) for m in messages} == {(2, CONTENT_TYPE)}
    assert all(r.published_at is not None for r in rows)


def test_rows_stay_unpublished_until_the_broker_confirms_them(
    tmp_path: Path, rabbitmq_url: str, engine: Engine, broker: Broker, settings: Settings
) -> None:
    target = urlsplit(rabbitmq_url)
    with FaultProxy((target.hostname or "127.0.0.1", target.port or 5672)) as proxy:
        # No publish-ahead window: the relay's first reading of the queue's depth would wait on the paused
        # proxy when it comes after the pause (a slow machine), and it would publish nothing.
        update = {"rabbitmq_url": proxy.url_for(rabbitmq_url), "publish_ahead": 0}
        proxied = settings.model_copy(update=update)
        with running_relay(proxied, engine) as relay:
            wait_for(lambda: relay.connected, 15, what="relay connected")
            proxy.pause("to_client")  # the broker's confirms are held back; publishes still reach it
            seed_jobs(engine, 50)
            wait_for(lambda: broker.count() == 50, 15, what="messages in the queue")
            assert unpublished(engine) == 50
            time.sleep(0.5)
            assert unpublished(engine) == 50
            assert relay.counts.confirmed == 0
            proxy.resume()
            wait_for(lambda: unpublished(engine) == 0, 15, what="rows marked after their confirms")
    assert broker.count() == 50


def test_a_window_of_unconfirmed_messages_publishes_thousands_of_rows_in_few_transactions(
    settings: Settings, engine: Engine, broker: Broker
) -> None:
    rows = 5000
    seed_jobs(engine, rows)
    settings = settings.model_copy(update={"publish_ahead": 0})  # nobody consumes here: no bound
    before = db.stats.snapshot()["write_transactions"]
    started = time.monotonic()
    with running_relay(settings, engine) as relay:
        wait_for(lambda: unpublished(engine) == 0, 60, interval=0.02, what="all rows published")
        elapsed = time.monotonic() - started
        writes = db.stats.snapshot()["write_transactions"] - before
    print(
        f"relay: {rows} rows in {elapsed:.2f}s = {rows / elapsed:.0f} rows/s; {writes} write transactions; "
        f"peak unconfirmed {relay.peak_unconfirmed}"
    )
    assert relay.peak_unconfirmed >= settings.relay_batch_size
    assert writes < rows / 20
    assert relay.counts.marked == rows
    assert broker.count() == rows

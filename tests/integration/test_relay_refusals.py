"""What the relay does when the broker does not take a message (returned, nacked), and when its own lease
was taken over: the row is never marked by the wrong party."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sqlalchemy import Engine

from outbox_bridge.broker.topology import ROUTING_KEY
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, leader
from outbox_bridge.relay import ledger
from outbox_bridge.relay.window import Sent
from tests.conftest import make_settings
from tests.support.faultproxy import FaultProxy
from tests.support.procs import wait_for
from tests.support.relay_harness import Broker, outbox_rows, running_relay, seed_jobs, unpublished

pytestmark = pytest.mark.broker


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str) -> Settings:
    return make_settings(tmp_path, rabbitmq_url=rabbitmq_url, shutdown_grace_seconds=5)


@pytest.fixture
def broker(settings: Settings, rabbitmq_url: str) -> Iterator[Broker]:
    broker = Broker(rabbitmq_url, settings)
    yield broker
    broker.cleanup()


def test_a_returned_message_leaves_its_row_pending_until_a_queue_is_bound(
    settings: Settings, engine: Engine, broker: Broker
) -> None:
    with running_relay(settings, engine) as relay:
        wait_for(lambda: relay.connected, 15, what="relay connected")
        broker.channel.queue_unbind(settings.queue, settings.exchange, routing_key=ROUTING_KEY)
        seed_jobs(engine, 3)
        wait_for(lambda: relay.counts.released >= 3, 15, what="returned rows released")
        rows = outbox_rows(engine)
        assert [r.published_at for r in rows] == [None, None, None]
        assert all(r.publish_attempts >= 1 for r in rows)
        assert relay.counts.marked == 0
        broker.channel.queue_bind(settings.queue, settings.exchange, routing_key=ROUTING_KEY)
        wait_for(lambda: unpublished(engine) == 0, 15, what="rows published once routable")
    assert broker.count() == 3


def test_a_nacked_message_leaves_its_row_pending(settings: Settings, engine: Engine, broker: Broker) -> None:
    broker.declare_topology()
    overflow = f"overflow-{uuid.uuid4().hex[:8]}"
    # A second queue on the same route that takes 5 messages, then rejects: the broker nacks the rest.
    broker.declare_queue(overflow, {"x-max-length": 5, "x-overflow": "reject-publish"})
    seed_jobs(engine, 20)
    with running_relay(settings, engine) as relay:
        wait_for(lambda: relay.counts.released >= 15, 15, what="nacked rows released")
        # The nacked rows come due again, and are nacked again.
        wait_for(lambda: relay.counts.refused >= 30, 15, what="nacked rows published and nacked again")
        rows = outbox_rows(engine)
        assert [r.id for r in rows if r.published_at is not None] == [r.id for r in rows[:5]]
        assert relay.counts.marked == 5
        broker.channel.queue_delete(overflow)
        wait_for(lambda: unpublished(engine) == 0, 15, what="rows published once the broker takes them")


def test_a_relay_whose_role_passed_on_cannot_mark_rows(engine: Engine, clock: FakeClock) -> None:
    seed_jobs(engine, 4)
    assert db.transact(engine, leader.take, "old", now=clock.now(), seconds=5)
    stale, _ = db.read(engine, leader.due, "old", now=clock.now(), limit=10)
    clock.advance(6)
    assert db.transact(engine, leader.take, "new", now=clock.now(), seconds=5)
    current, _ = db.read(engine, leader.due, "new", now=clock.now(), limit=10)
    assert [row for row, _ in current.rows] == [row for row, _ in stale.rows]

    late = ledger.PublishResults()
    late.add_confirmed(Sent(row, "old") for row, _ in stale.rows)
    settled = db.transact(engine, ledger.settle, late, now=clock.now())
    assert (settled.marked, settled.stale) == (0, 4)
    assert unpublished(engine) == 4

    owner = ledger.PublishResults()
    owner.add_confirmed(Sent(row, "new") for row, _ in current.rows)
    assert db.transact(engine, ledger.settle, owner, now=clock.now()).marked == 4


def test_a_relay_whose_lease_was_taken_over_marks_nothing(
    settings: Settings, engine: Engine, broker: Broker, rabbitmq_url: str
) -> None:
    target = urlsplit(rabbitmq_url)
    with FaultProxy((target.hostname or "127.0.0.1", target.port or 5672)) as proxy:
        # The stalled relay fills its window with the 10 rows, then hears no confirms for a while. (No
        # publish-ahead window: its first reading of the queue's depth would wait on the paused proxy when
        # it comes after the pause, on a slow machine, and it would publish nothing.)
        stalled = settings.model_copy(
            update={
                "rabbitmq_url": proxy.url_for(rabbitmq_url),
                "relay_lease_seconds": 1.0,
                "relay_window": 10,
                "relay_batch_size": 10,
                "publish_ahead": 0,
            }
        )
        with running_relay(stalled, engine) as first:
            wait_for(lambda: first.connected, 15, what="first relay connected")
            proxy.pause("to_client")
            seed_jobs(engine, 10)
            wait_for(lambda: broker.count() == 10, 15, what="the first relay's messages")
            time.sleep(1.2)  # its lease runs out
            with running_relay(settings, engine) as second:
                wait_for(lambda: unpublished(engine) == 0, 15, what="the second relay took over")
            marked_by_second = [(r.published_at, r.publish_attempts) for r in outbox_rows(engine)]
            proxy.resume()
            wait_for(lambda: first.counts.stale == 10, 15, what="the first relay's late confirms")
            assert first.counts.marked == 0
    assert second.counts.marked == 10
    assert [(r.published_at, r.publish_attempts) for r in outbox_rows(engine)] == marked_by_second
    assert broker.count() == 20  # both published: the consumer absorbs the duplicate

"""Several broker addresses in RABBITMQ_URL, against the real RabbitMQ and the real store (SQLite and
PostgreSQL): the relay and a consumer connect through the first node that answers, and after a lost
connection through the next one, and their heartbeats name the node they are on."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sqlalchemy import Engine

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, heartbeats, queries
from outbox_bridge.relay.main import relay_detail
from tests.conftest import make_settings
from tests.support.faultproxy import FaultProxy
from tests.support.invariants import check_invariants
from tests.support.procs import wait_for
from tests.support.relay_harness import Broker, running_consumer, running_relay, seed_jobs

pytestmark = pytest.mark.broker


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str) -> Settings:
    return make_settings(
        tmp_path, rabbitmq_url=rabbitmq_url, heartbeat_seconds=0.2, shutdown_grace_seconds=3.0
    )


@pytest.fixture
def broker(settings: Settings, rabbitmq_url: str) -> Iterator[Broker]:
    broker = Broker(rabbitmq_url, settings)
    yield broker
    broker.cleanup()


@contextmanager
def closed_port() -> Iterator[int]:
    """A port of this machine that refuses connections (bound, never listening) while the block runs."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


def succeeded(engine: Engine) -> int:
    return int(db.read(engine, queries.counts_by_state).get("succeeded", 0))


def consumer_beat(engine: Engine) -> dict[str, object]:
    """The detail of the consumer's latest heartbeat (there is one consumer here)."""
    [process] = [p for p in db.read(engine, heartbeats.seen_since, 0.0) if p.role == "consumer"]
    return process.detail


def test_the_relay_and_a_consumer_connect_through_the_first_address_that_answers(
    settings: Settings, engine: Engine, broker: Broker, rabbitmq_url: str
) -> None:
    broker.declare_topology()
    node = urlsplit(rabbitmq_url)
    with closed_port() as port:
        listed = settings.model_copy(
            update={"rabbitmq_url": f"amqp://guest:guest@127.0.0.1:{port}/%2F, {rabbitmq_url}"}
        )
        with (
            running_consumer(listed, engine, concurrency=2) as consumer,
            running_relay(listed, engine) as relay,
        ):
            ids = seed_jobs(engine, 3)
            wait_for(lambda: succeeded(engine) == 3, 15, what="the jobs ran")
            assert consumer.pools[0].link.node == relay.node == f"{node.hostname}:{node.port}"
            assert relay_detail(relay)["broker"] == relay.node
            wait_for(lambda: consumer_beat(engine).get("broker") == relay.node, 5, what="the beat's node")
    check_invariants(listed, accepted=ids, engine=engine)


def test_a_lost_connection_moves_the_relay_and_a_consumer_to_the_next_node(
    settings: Settings, engine: Engine, broker: Broker, rabbitmq_url: str
) -> None:
    broker.declare_topology()
    upstream = urlsplit(rabbitmq_url)
    target = (upstream.hostname or "127.0.0.1", upstream.port or 5672)
    with FaultProxy(target) as first, FaultProxy(target) as second:
        addresses = f"{first.url_for(rabbitmq_url)},{second.url_for(rabbitmq_url)}"
        listed = settings.model_copy(update={"rabbitmq_url": addresses})
        with (
            running_consumer(listed, engine, concurrency=2) as consumer,
            running_relay(listed, engine) as relay,
        ):
            wait_for(
                lambda: consumer.pools[0].link.node is not None and relay.connected, 10, what="both connected"
            )
            assert consumer.pools[0].link.node == relay.node == f"127.0.0.1:{first.port}"
            assert second.links == 0
            # The first node drops every connection but still answers: they move to the second all the same.
            assert first.cut() >= 2
            to_second = f"127.0.0.1:{second.port}"
            wait_for(
                lambda: consumer.pools[0].link.node == relay.node == to_second, 10, what="both on the second"
            )
            ids = seed_jobs(engine, 3)
            wait_for(lambda: succeeded(engine) == 3, 15, what="the jobs ran")
            wait_for(lambda: consumer_beat(engine).get("broker") == to_second, 5, what="the beat's node")
            assert relay_detail(relay)["broker"] == to_second
    check_invariants(listed, accepted=ids, engine=engine)

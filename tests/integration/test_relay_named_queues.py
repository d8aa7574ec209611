"""The relay declares a named queue on demand, on a channel of its own: a queue the broker will not declare
(one of that name exists with other arguments) holds back its own rows only, while the other queues' rows
are published on the same connection, and its rows go out once the declaration succeeds."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from outbox_bridge.broker import topology
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, intake
from tests.conftest import make_settings
from tests.support.procs import wait_for
from tests.support.relay_harness import Broker, Row, outbox_rows, running_relay, unpublished

pytestmark = pytest.mark.broker


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str) -> Settings:
    return make_settings(tmp_path, rabbitmq_url=rabbitmq_url, shutdown_grace_seconds=5)


@pytest.fixture
def broker(settings: Settings, rabbitmq_url: str) -> Iterator[Broker]:
    broker = Broker(rabbitmq_url, settings)
    yield broker
    broker.channel.queue_delete(topology.queue_name(settings, "fast"))
    broker.cleanup()


def on_queue(engine: Engine, queue: str) -> str:
    accepted = db.transact(
        engine, intake.accept, tenant="acme", owner="alice", kind="noop", payload={},
        operation_key=intake.new_id(), now=time.time(), max_attempts=3, queue=queue,
    )  # fmt: skip
    return accepted.job.id


def held_row(engine: Engine) -> Row:
    [row] = [row for row in outbox_rows(engine) if row.published_at is None]
    return row


def test_a_queue_the_broker_will_not_declare_holds_back_its_own_rows_only(
    settings: Settings, engine: Engine, broker: Broker
) -> None:
    taken = topology.queue_name(settings, "taken")
    broker.declare_queue(taken, {}, bind=False)  # not durable, not a quorum queue: the relay's is refused
    held = on_queue(engine, "taken")
    on_queue(engine, "fast")

    with running_relay(settings, engine) as relay:
        wait_for(lambda: unpublished(engine) == 1, 15, what="the fast job's row published")
        # the count moves when a refusal reaches the relay, the row's attempts when the store has it
        wait_for(lambda: relay.counts.refused >= 2, 15, what="the declaration refused, and again")
        wait_for(lambda: held_row(engine).publish_attempts >= 2, 15, what="the refusals in the store")
        assert relay.connected
        assert held_row(engine).job_id == held
        assert broker.count(topology.queue_name(settings, "fast")) == 1

        broker.channel.queue_delete(taken)
        wait_for(lambda: unpublished(engine) == 0, 15, what="its row published once the queue is declared")
    assert broker.count(taken) == 1

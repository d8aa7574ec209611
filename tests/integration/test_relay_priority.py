"""The relay keeps at most `PUBLISH_AHEAD` messages waiting in the queue and leaves the rest in the outbox,
which it leases in the store's order: a `high` job that arrives behind a backlog is published before the
backlog's rest, so it waits behind at most that window."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from outbox_bridge.broker.message import JobMessage
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore.priorities import Priority
from tests.conftest import make_settings
from tests.support.procs import wait_for
from tests.support.relay_harness import Broker, running_relay, seed_jobs, unpublished
from tests.support.store import new_job

pytestmark = pytest.mark.broker

AHEAD = 100
BACKLOG = 400


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str) -> Settings:
    return make_settings(tmp_path, rabbitmq_url=rabbitmq_url, publish_ahead=AHEAD)


@pytest.fixture
def broker(settings: Settings, rabbitmq_url: str) -> Iterator[Broker]:
    broker = Broker(rabbitmq_url, settings)
    yield broker
    broker.cleanup()


def take(broker: Broker, count: int) -> list[str]:
    """Consume (and ack) `count` messages, oldest first; the job ids they carry."""
    taken: list[str] = []
    deadline = time.monotonic() + 30
    while len(taken) < count:
        assert time.monotonic() < deadline, f"only {len(taken)} of {count} messages came"
        method, _, body = broker.channel.basic_get(broker.settings.queue)
        if method is None:
            time.sleep(0.01)
            continue
        broker.channel.basic_ack(method.delivery_tag)
        taken.append(JobMessage.decode(body).job_id)
    return taken


def test_a_high_job_is_published_ahead_of_a_backlog_held_in_the_outbox(
    settings: Settings, engine: Engine, broker: Broker
) -> None:
    broker.declare_topology()
    backlog = seed_jobs(engine, BACKLOG)
    with running_relay(settings, engine):
        wait_for(lambda: broker.count() == AHEAD, 30, what="the queue filled to PUBLISH_AHEAD")
        time.sleep(0.5)  # the relay holds there: nobody consumes
        assert (broker.count(), unpublished(engine)) == (AHEAD, BACKLOG - AHEAD)

        high = new_job(engine, "urgent", priority=Priority.HIGH)
        order = take(broker, BACKLOG + 1)  # the relay tops the queue up as it drains

    assert sorted(order) == sorted([*backlog, high]), "every job published once"
    assert order.index(high) == AHEAD, "behind only what was already in the queue"

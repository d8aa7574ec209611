"""The consumer's broker link acks a round's deliveries in as few frames as it may (`ack_frames`): one
`multiple` ack for the run of tags below which nothing else is unsettled, the rest one by one. Against a
real RabbitMQ: what was not acked comes back once the link is gone, and nothing else does."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from outbox_bridge.broker import topology
from outbox_bridge.broker.message import JobMessage
from outbox_bridge.consumer.link import Delivery, DeliveryLink
from outbox_bridge.core.settings import Settings
from tests.conftest import make_settings
from tests.support.procs import wait_for

pytestmark = [pytest.mark.broker, pytest.mark.databases("sqlite")]

MESSAGES = 10


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str) -> Iterator[Settings]:
    settings = make_settings(tmp_path, rabbitmq_url=rabbitmq_url)
    yield settings
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    topology.delete(connection.channel(), settings)
    connection.close()


def _publish(settings: Settings, job_ids: list[str]) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(settings.rabbitmq_url))
    channel = connection.channel()
    topology.declare(channel, settings)
    channel.confirm_delivery()
    for job_id in job_ids:
        channel.basic_publish(
            settings.exchange,
            topology.ROUTING_KEY,
            JobMessage(job_id).encode(),
            pika.BasicProperties(delivery_mode=2),
        )
    connection.close()


def _left(settings: Settings) -> list[str]:
    """The job ids of the messages ready in the queue, taken off it."""
    connection = pika.BlockingConnection(pika.URLParameters(settings.rabbitmq_url))
    channel = connection.channel()
    found = []
    while True:
        method, _properties, body = channel.basic_get(settings.queue, auto_ack=True)
        if method is None:
            break
        found.append(JobMessage.decode(body).job_id)
    connection.close()
    return found


def test_acks_of_a_round_leave_exactly_the_others_unacked(settings: Settings) -> None:
    job_ids = [str(uuid.uuid4()) for _ in range(MESSAGES)]
    _publish(settings, job_ids)
    received: list[Delivery] = []
    lock = threading.Lock()

    def on_delivery(delivery: Delivery) -> None:
        with lock:
            received.append(delivery)

    link = DeliveryLink(settings, prefetch=MESSAGES, on_delivery=on_delivery).start()
    try:
        wait_for(lambda: len(received) == MESSAGES, timeout=10, what="every delivery")
        by_job = {d.job_id: d for d in received}
        first = [by_job[job_ids[i]] for i in (3, 0, 1, 2, 5, 6)]  # a run from the first, and two beyond a gap
        assert link.ack(first) == len(first)
        second = [by_job[job_ids[8]]]  # beyond two gaps
        assert link.ack(second) == 1
    finally:
        link.close()  # after the acks handed over: the fifth, eighth and tenth were never acked
    wait_for(lambda: _ready(settings) == 3, timeout=10, what="the unacked messages back in the queue")
    assert sorted(_left(settings)) == sorted(job_ids[i] for i in (4, 7, 9))


def _ready(settings: Settings) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(settings.rabbitmq_url))
    declared = connection.channel().queue_declare(settings.queue, passive=True)
    connection.close()
    return int(declared.method.message_count)

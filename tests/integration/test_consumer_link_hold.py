"""The consumer's broker link against a real RabbitMQ: it says which deliveries it has held past
`CONSUMER_DELIVERY_HOLD_SECONDS` (so the broker's `consumer_timeout` never closes its channel), settles each
delivery once however often it is asked to, and consumes again on a new connection when the broker closes
its channel all the same."""

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

HOLD_SECONDS = 0.3


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str) -> Iterator[Settings]:
    settings = make_settings(tmp_path, rabbitmq_url=rabbitmq_url, consumer_delivery_hold_seconds=HOLD_SECONDS)
    yield settings
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    topology.delete(connection.channel(), settings)
    connection.close()


def publish(settings: Settings, count: int) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(settings.rabbitmq_url))
    channel = connection.channel()
    topology.declare(channel, settings)
    for _ in range(count):
        channel.basic_publish(settings.exchange, topology.ROUTING_KEY, JobMessage(str(uuid.uuid4())).encode())
    connection.close()


class Received:
    """What the link handed over, and what it said was held too long."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.held: list[tuple[int, int]] = []
        self._lock = threading.Lock()

    def delivery(self, delivery: Delivery) -> None:
        with self._lock:
            self.deliveries.append(delivery)

    def held_past(self, generation: int, upto: int) -> None:
        with self._lock:
            self.held.append((generation, upto))


@pytest.fixture
def received() -> Received:
    return Received()


@pytest.fixture
def link(settings: Settings, received: Received) -> Iterator[DeliveryLink]:
    publish(settings, 0)  # the topology, before the link consumes
    made = DeliveryLink(settings, 10, received.delivery, received.held_past).start()
    yield made
    made.close()


def test_the_link_says_which_deliveries_it_has_held_past_the_hold_until_they_are_settled(
    settings: Settings, link: DeliveryLink, received: Received
) -> None:
    publish(settings, 3)
    wait_for(lambda: len(received.deliveries) == 3, 10, what="three deliveries")
    # The three arrive moments apart, and the link notes the newest tag it holds every eighth of the hold:
    # its first word may name only the first ones, and it names all three within a hold more.
    wait_for(lambda: (1, 3) in received.held, 5, what="the link saying all three were held too long")
    tags = [upto for generation, upto in received.held if generation == 1]
    assert tags == sorted(tags) and tags[-1] == 3, received.held
    assert link.ack(received.deliveries) == 3
    wait_for(lambda: not link._unsettled, 5, what="the acks sent")
    told = len(received.held)
    threading.Event().wait(3 * HOLD_SECONDS)
    assert len(received.held) == told, "the link went on about deliveries it had settled"


def test_a_delivery_acked_twice_is_acked_once_and_the_link_keeps_consuming(
    settings: Settings, link: DeliveryLink, received: Received
) -> None:
    publish(settings, 1)
    wait_for(lambda: len(received.deliveries) == 1, 10, what="the delivery")
    link.ack(received.deliveries)
    link.ack(received.deliveries)  # a second ack of the tag would close the channel
    publish(settings, 1)
    wait_for(lambda: len(received.deliveries) == 2, 10, what="the next delivery")
    assert link.generation == 1 and received.deliveries[1].generation == 1


def test_a_channel_the_broker_closes_is_consumed_again_on_a_new_connection(
    settings: Settings, link: DeliveryLink, received: Received
) -> None:
    wait_for(link.connected, 10, what="the link connected")

    def channel_error() -> None:
        link._channel.basic_ack(999)  # a tag the broker never sent: it closes the channel

    assert link._call_soon(channel_error)
    wait_for(lambda: link.generation == 2, 10, what="a new connection")
    publish(settings, 1)
    wait_for(lambda: len(received.deliveries) == 1, 10, what="a delivery on the new connection")
    assert received.deliveries[0].generation == 2

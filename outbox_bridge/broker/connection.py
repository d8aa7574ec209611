"""How every process connects to RabbitMQ: the URL's parameters, the errors that mean "the broker link
failed", and a short-lived probe for a queue's depth."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import pika
import pika.exceptions

from outbox_bridge.core.settings import Settings

BROKER_ERRORS = (pika.exceptions.AMQPError, OSError)
PROBE_TIMEOUT_SECONDS = 2.0
NOT_FOUND = 404  # AMQP's reply code for a passive declare of a queue that does not exist


def connection_parameters(
    url: str, *, name: str, blocked_timeout: float | None = None, timeout: float | None = None
) -> pika.URLParameters:
    """The broker URL's parameters with one connection attempt (retries are the caller's own backoff),
    named `name` in the broker's connection list. Unless the URL says otherwise, a connection the broker
    keeps blocked (resource alarm) for `blocked_timeout` seconds is dropped; `timeout` bounds the socket,
    the handshake and a blocked connection alike, for probes that must answer quickly."""
    params = pika.URLParameters(url)
    params.connection_attempts = 1
    params.client_properties = {"connection_name": f"outbox-bridge {name}"}
    if params.blocked_connection_timeout is None and blocked_timeout is not None:
        params.blocked_connection_timeout = blocked_timeout
    if timeout is not None:
        params.socket_timeout = params.blocked_connection_timeout = params.stack_timeout = timeout
    return params


def describe(params: pika.ConnectionParameters) -> str:
    """Where a connection goes, without credentials."""
    return f"{params.host}:{params.port}/{params.virtual_host}"


@dataclass(frozen=True)
class QueueDepth:
    """What a probe of one queue found: its `messages`, or None and the `problem` that kept it from
    counting them."""

    messages: int | None
    problem: str | None = None

    def __str__(self) -> str:
        return f"{self.messages} messages" if self.messages is not None else str(self.problem)


NO_ANSWER = "the broker did not answer"
NO_QUEUE = "the broker answered: the queue does not exist"


def queue_probe(settings: Settings, queue: str, timeout: float = PROBE_TIMEOUT_SECONDS) -> QueueDepth:
    """How many messages wait in `queue` now, or why that is not known: the broker did not answer within
    `timeout`, or it has no such queue (nothing declared it yet)."""
    params = connection_parameters(settings.rabbitmq_url, name="probe", timeout=timeout)
    try:
        connection = pika.BlockingConnection(params)
    except BROKER_ERRORS:
        return QueueDepth(None, NO_ANSWER)
    try:
        declared = connection.channel().queue_declare(queue, passive=True)
        return QueueDepth(int(declared.method.message_count))
    except pika.exceptions.ChannelClosedByBroker as exc:
        return QueueDepth(None, NO_QUEUE if exc.reply_code == NOT_FOUND else NO_ANSWER)
    except BROKER_ERRORS:
        return QueueDepth(None, NO_ANSWER)
    finally:
        with contextlib.suppress(*BROKER_ERRORS):
            connection.close()


def queue_depth(settings: Settings, queue: str, timeout: float = PROBE_TIMEOUT_SECONDS) -> int | None:
    """How many messages wait in `queue` now; None when that is not known (`queue_probe` says why)."""
    return queue_probe(settings, queue, timeout).messages

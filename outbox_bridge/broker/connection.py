"""How every process connects to RabbitMQ: the parameters of each node RABBITMQ_URL lists, the order a
connection tries them in, the errors that mean "the broker link failed", and a short-lived probe for a
queue's depth."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import pika
import pika.exceptions

from outbox_bridge.core import amqp_urls
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


def broker_addresses(
    url: str, *, name: str, blocked_timeout: float | None = None, timeout: float | None = None
) -> list[pika.URLParameters]:
    """`connection_parameters` of each node RABBITMQ_URL lists (comma-separated), in its order. The settings
    checked every address when they were read (`core.amqp_urls.check`)."""
    return [
        connection_parameters(address, name=name, blocked_timeout=blocked_timeout, timeout=timeout)
        for address in amqp_urls.split(url)
    ]


def describe(params: pika.ConnectionParameters) -> str:
    """Where a connection goes, without credentials."""
    return f"{params.host}:{params.port}/{params.virtual_host}"


def node_of(params: pika.ConnectionParameters) -> str:
    """The node a connection goes to, `host:port` (what heartbeats report as `broker`)."""
    return f"{params.host}:{params.port}"


class BrokerNodes:
    """The nodes a process may connect to, and the order its next connection tries them in: from the first
    listed, and after a connection to one of them was lost, from the node after it (the lost one last)."""

    def __init__(self, addresses: Sequence[pika.URLParameters]) -> None:
        if not addresses:
            raise ValueError("no broker address")
        self.addresses = tuple(addresses)
        self._first = 0

    def in_order(self) -> list[pika.URLParameters]:
        """Every node, in the order the next connection tries them."""
        return [*self.addresses[self._first :], *self.addresses[: self._first]]

    def lost(self, node: pika.URLParameters) -> None:
        """The connection to `node` was lost: the next connection tries the node after it first."""
        for index, params in enumerate(self.addresses):
            if params is node:
                self._first = (index + 1) % len(self.addresses)
                return


def connect_first(nodes: Sequence[pika.URLParameters]) -> tuple[pika.BlockingConnection, pika.URLParameters]:
    """A connection to the first of `nodes` that answers, and that node's parameters. Raises the last
    node's error when none answers (one attempt each; retries are the caller's own backoff)."""
    failure: BaseException = ValueError("no broker address")
    for params in nodes:
        try:
            return pika.BlockingConnection(params), params
        except BROKER_ERRORS as exc:
            failure = exc
    raise failure


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
    """How many messages wait in `queue` now, or why that is not known: no node of the broker answered
    within `timeout` (each), or it has no such queue (nothing declared it yet)."""
    nodes = broker_addresses(settings.rabbitmq_url, name="probe", timeout=timeout)
    try:
        connection, _node = connect_first(nodes)
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

"""The consumer's one broker connection, owned by one thread.

pika is single-threaded, so a `DeliveryLink` keeps its `BlockingConnection` on a thread of its own that does
nothing but AMQP I/O: it dispatches deliveries, answers heartbeats (the loop never waits on a job or on
the store), and runs the acks and nacks other threads hand it through `add_callback_threadsafe`.
`BlockingConnection` is enough here: one consumer and a few thread-safe callbacks do not need the
callback-driven `SelectConnection`, and its loop (`process_data_events`) returns as soon as there is work.

Every delivery carries the generation of the connection it came on. A lost connection ends its generation;
acks for its deliveries are dropped, never sent on a newer channel (where the tag would name another
message or none). The broker redelivers those messages and the claim absorbs the duplicates. A delivery is
settled once: a second ack or nack of it is dropped too (an ack of a tag the broker no longer holds would
close the channel).

RabbitMQ closes a channel whose oldest unacknowledged delivery is older than its `consumer_timeout` (30
minutes by default). So the link watches how long it has held its deliveries (`DeliveryAges`) and, once one
is held longer than `CONSUMER_DELIVERY_HOLD_SECONDS`, tells its owner (`on_held_past`), which settles it the
store's way. A channel the broker closes all the same (for that or any other channel error) ends the
connection: the link consumes again on a new one.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import pika
import pika.exceptions

from outbox_bridge.broker import topology
from outbox_bridge.broker.connection import (
    BROKER_ERRORS,
    BrokerNodes,
    broker_addresses,
    connect_first,
    node_of,
)
from outbox_bridge.broker.message import NORMAL_RANK, JobMessage, UndecodableMessage, order_of, traceparent_of
from outbox_bridge.core.backoff import Backoff, Streak
from outbox_bridge.core.queue_names import DEFAULT_QUEUE
from outbox_bridge.core.settings import Settings
from outbox_bridge.telemetry.instruments import BROKER_RECONNECTS, DEAD_LETTERED, DELIVERIES

log = logging.getLogger(__name__)

RECONNECT_FIRST_PAUSE = 0.1
RECONNECT_MAX_PAUSE = 2.0
LOOP_SLICE = 0.1
HEARTBEAT_MIN_SECONDS, HEARTBEAT_MAX_SECONDS = 5, 60
NOTES_PER_HOLD = 8  # how finely `DeliveryAges` tells a delivery's age: to within this part of the hold


@dataclass(frozen=True)
class Delivery:
    """One message as received: which job it names, and where its ack must go."""

    job_id: str
    tag: int
    generation: int
    message_id: str | None = None
    redelivered: bool = False
    traceparent: str | None = None  # the publish span's, from the message headers (`broker.message`)
    # What the consumer orders held deliveries by: the job's priority rank, then turns across tenants.
    priority: int = NORMAL_RANK
    tenant: str = ""


def ack_frames(unsettled: Collection[int], tags: Collection[int]) -> tuple[int, list[int]]:
    """How to ack `tags` of a channel whose `unsettled` deliveries they are among, in as few frames as AMQP
    allows: (the tag of one `multiple` ack, 0 for none; the tags to ack one by one). The multiple ack
    covers the run of tags from the lowest unsettled one for as long as every unsettled tag is acked now.
    Each ack is a frame and a flush of the connection's output: a round's acks in one frame save most of
    a consumer's AMQP work. (Deliveries arrive in tag order, so no unsettled tag below the run is unknown
    to the caller.)"""
    acking = set(tags)
    upto = 0
    for tag in sorted(unsettled):
        if tag not in acking:
            break
        upto = tag
    return upto, sorted(tag for tag in acking if tag > upto)


class DeliveryAges:
    """How long a channel's deliveries have been held, to within `hold / NOTES_PER_HOLD` seconds, without a
    clock read per delivery: every so often the link notes the highest tag it holds (a channel numbers its
    deliveries in the order it sends them), so every tag up to a note's arrived before that note."""

    def __init__(self, hold: float) -> None:
        self.hold = hold
        self.step = hold / NOTES_PER_HOLD
        self.next_note = 0.0  # monotonic seconds
        self._notes: collections.deque[tuple[float, int]] = collections.deque()  # (when, highest tag)

    def clear(self) -> None:
        """A new channel: its tags start again."""
        self._notes.clear()
        self.next_note = 0.0

    def note(self, now: float, highest: int) -> int:
        """Note that tags up to `highest` have arrived by `now`; returns the highest tag that arrived at least
        `hold` seconds ago (0: none can be told so)."""
        self.next_note = now + self.step
        if not self._notes or highest > self._notes[-1][1]:
            self._notes.append((now, highest))
        while len(self._notes) > 1 and self._notes[1][0] <= now - self.hold:
            self._notes.popleft()  # a later note is old enough too, and covers more tags
        when, tag = self._notes[0]
        return tag if when <= now - self.hold else 0


class ConsumerCancelledByBroker(Exception):
    """The broker cancelled our consumer (its queue was deleted or moved): consume again on a new channel."""


class ChannelClosedByBroker(Exception):
    """The broker closed the consumer's channel (a channel error: a delivery held past its
    `consumer_timeout`, say): consume again on a new connection."""


def heartbeat_seconds(lease_seconds: float) -> int:
    """The AMQP heartbeat a consumer asks for (unless its URL names one): about a lease, 5 to 60 s. A consumer
    that stops answering (paused, hung) loses its connection after about that long, and the broker gives
    what it held, run or not yet, to the others: about when the sweeper would free the jobs it was running."""
    return int(min(HEARTBEAT_MAX_SECONDS, max(HEARTBEAT_MIN_SECONDS, lease_seconds)))


class DeliveryLink:
    """Consumes the broker queue of each of the named `queues` (by default `default`'s, `settings.queue`) on
    one channel, with `prefetch` unacked deliveries at most from each, reconnecting with bounded
    backoff until closed: to the first node of RABBITMQ_URL that answers, and after a lost connection to
    the node after the lost one first (`BrokerNodes`). `on_delivery` is called on the link's thread for each
    decodable message; an undecodable one is rejected without requeue (dead-lettered) and logged.

    The prefetch is fixed: the link never opens or cancels a subscription to pace its owner, because a
    cancelled subscription gives back what it had not handed over (pika rejects it with requeue), and every
    return spends one of the message's deliveries before the quorum queue dead-letters it.

    `on_held_past(generation, tag)` is called on the link's thread, at most every `DeliveryAges` step,
    while deliveries of connection `generation` up to `tag` are still unsettled and have been held longer
    than `CONSUMER_DELIVERY_HOLD_SECONDS`."""

    def __init__(
        self,
        settings: Settings,
        prefetch: int,
        on_delivery: Callable[[Delivery], None],
        on_held_past: Callable[[int, int], None] | None = None,
        queues: Sequence[str] = (DEFAULT_QUEUE,),
    ) -> None:
        self._settings = settings
        self._queues = tuple(queues)
        self._names = ", ".join(topology.queue_name(settings, queue) for queue in self._queues)
        addresses = broker_addresses(settings.rabbitmq_url, name="consumer")
        for params in addresses:
            if params.heartbeat is None:  # its URL names none
                params.heartbeat = heartbeat_seconds(settings.lease_seconds)
        self._nodes = BrokerNodes(addresses)
        self._node: pika.URLParameters | None = None  # the node of the open connection
        self._prefetch = prefetch
        self._on_delivery = on_delivery
        self._lock = threading.Lock()
        self._connection: pika.BlockingConnection | None = None
        self._channel: Any = None
        self._generation = 0
        self._down_since: float | None = time.monotonic()
        self._consuming = True
        self._closing = threading.Event()
        self._cancelled_by_broker = False
        self._consumer_tags: list[str] = []
        self._unsettled: set[int] = set()  # tags handed to `on_delivery` on this channel, not acked or nacked
        self._on_held_past = on_held_past
        self._ages = DeliveryAges(settings.consumer_delivery_hold_seconds)
        self._thread = threading.Thread(target=self._loop, name="amqp-link", daemon=True)

    def start(self) -> DeliveryLink:
        self._thread.start()
        return self

    @property
    def generation(self) -> int:
        """How many connections have been opened so far; deliveries carry the one they came on."""
        return self._generation

    def connected(self) -> bool:
        with self._lock:
            return self._connection is not None

    @property
    def node(self) -> str | None:
        """The node the connection is open to (`host:port`), None while there is none."""
        node = self._node
        return node_of(node) if node is not None else None

    def down_for(self) -> float:
        """Seconds since the broker was last reachable (0 while connected)."""
        since = self._down_since
        return 0.0 if since is None else time.monotonic() - since

    def ack(self, deliveries: Sequence[Delivery]) -> int:
        """Ack on the channel each delivery came on; deliveries of an older connection are dropped.
        Thread-safe. Returns how many acks were handed to the connection."""
        return self._settle(deliveries, requeue=None)

    def requeue(self, deliveries: Sequence[Delivery]) -> int:
        """Give deliveries back to the queue unprocessed (nack with requeue): only for a consumer that stops,
        since each return counts toward the queue's delivery limit. Thread-safe."""
        return self._settle(deliveries, requeue=True)

    def reject(self, deliveries: Sequence[Delivery]) -> int:
        """Dead-letter deliveries (nack without requeue): for a message the store cannot take at all. The
        relay's dead-letter check settles it from the store. Thread-safe."""
        return self._settle(deliveries, requeue=False)

    def stop_consuming(self) -> None:
        """Cancel the consumer (no new deliveries), keeping the connection for the acks still to come."""
        self._consuming = False
        self._call_soon(self._cancel_consumer)

    def close(self, timeout: float = 5.0) -> None:
        """Close the connection after the acks already handed over, and stop the thread."""
        if not self._call_soon(self._closing.set):
            self._closing.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._closing.set()
            self._thread.join(timeout)

    # The link's thread.

    def _loop(self) -> None:
        pauses = Streak(Backoff(RECONNECT_FIRST_PAUSE, RECONNECT_MAX_PAUSE))
        while not self._closing.is_set() and self._consuming:
            try:
                self._connect()
            except BROKER_ERRORS as exc:
                log.warning("cannot reach the broker: %r", exc)
            except Exception:
                log.exception("connecting to the broker failed unexpectedly")
            else:
                node = self._node
                self._serve_until_lost()
                pauses.reset()  # it was up: the first reconnect comes soon
                if node is not None:
                    self._nodes.lost(node)  # the next connection tries the node after it first
            finally:
                self._disconnect()
            if not self._consuming:
                break  # shutting down: acks for the old channel can never be sent on a new one
            BROKER_RECONNECTS.inc()
            self._closing.wait(pauses.failed())

    def _serve_until_lost(self) -> None:
        try:
            self._serve()
        except (*BROKER_ERRORS, ConsumerCancelledByBroker, ChannelClosedByBroker) as exc:
            log.warning("broker connection %d lost: %r", self._generation, exc)
        except Exception:
            log.exception("broker connection %d: unexpected error; reconnecting", self._generation)

    def _connect(self) -> None:
        connection, node = connect_first(self._nodes.in_order())
        try:
            channel = connection.channel()
            topology.declare(channel, self._settings, self._queues)
            # Per consumer (quorum queues have no channel-wide prefetch): each queue's at most.
            channel.basic_qos(prefetch_count=self._prefetch)
            channel.add_on_cancel_callback(self._on_cancelled_by_broker)
        except BaseException:
            # A node that takes the connection and then drops it (or refuses the topology) counts as lost:
            # the next attempt starts from the node after it, as after a connection lost while serving.
            self._nodes.lost(node)
            if connection.is_open:
                with contextlib.suppress(*BROKER_ERRORS):
                    connection.close()
            raise
        with self._lock:
            self._generation += 1
            self._connection, self._channel, self._node = connection, channel, node
            self._cancelled_by_broker = False
        self._unsettled = set()
        self._ages.clear()
        if self._consuming:
            on_message = partial(self._on_message, self._generation)
            try:
                self._consumer_tags = [
                    channel.basic_consume(
                        topology.queue_name(self._settings, queue), on_message_callback=on_message
                    )
                    for queue in self._queues
                ]
            except BaseException:
                self._nodes.lost(node)  # as above; `_loop` closes what is left of the connection
                raise
        self._down_since = None
        log.info(
            "broker connection %d open to %s, consuming %s", self._generation, node_of(node), self._names
        )

    def _serve(self) -> None:
        assert self._connection is not None
        while not self._closing.is_set():
            self._connection.process_data_events(time_limit=LOOP_SLICE)
            if self._cancelled_by_broker and self._consuming:
                raise ConsumerCancelledByBroker(self._names)
            if self._channel is not None and self._channel.is_closed:
                # pika's blocking channel says so only here: its deliveries and acks stopped with it.
                raise ChannelClosedByBroker(self._names)
            if self._unsettled and self._on_held_past is not None:
                self._look_at_held()

    def _look_at_held(self) -> None:
        """Once a step: tell the owner when the oldest delivery held has been held past the hold."""
        now = time.monotonic()
        if now < self._ages.next_note:
            return
        upto = self._ages.note(now, max(self._unsettled))
        if upto and min(self._unsettled) <= upto:
            assert self._on_held_past is not None
            self._on_held_past(self._generation, upto)

    def _disconnect(self) -> None:
        with self._lock:
            connection, self._connection, self._channel = self._connection, None, None
            self._node = None
        if self._down_since is None:
            self._down_since = time.monotonic()
        if connection is not None and connection.is_open:
            try:
                connection.close()
            except BROKER_ERRORS as exc:
                log.debug("closing the broker connection: %r", exc)

    def _on_message(self, generation: int, channel: Any, method: Any, properties: Any, body: bytes) -> None:
        try:
            message = JobMessage.decode(body)
        except UndecodableMessage as exc:
            log.warning("dead-lettering message %s: %s", properties.message_id, exc)
            channel.basic_reject(method.delivery_tag, requeue=False)
            DELIVERIES.labels(DEAD_LETTERED).inc()
            return
        priority, tenant = order_of(properties.headers)
        delivery = Delivery(
            job_id=message.job_id,
            tag=method.delivery_tag,
            generation=generation,
            message_id=properties.message_id,
            redelivered=bool(method.redelivered),
            traceparent=traceparent_of(properties.headers),
            priority=priority,
            tenant=tenant,
        )
        self._unsettled.add(delivery.tag)
        self._on_delivery(delivery)

    def _on_cancelled_by_broker(self, _frame: Any) -> None:
        self._cancelled_by_broker = True

    def _cancel_consumer(self) -> None:
        channel = self._channel
        if channel is not None and channel.is_open and self._consumer_tags:
            for tag in self._consumer_tags:
                channel.basic_cancel(tag)
            self._consumer_tags = []
            log.info("stopped consuming %s", self._names)

    def _send(self, generation: int, deliveries: Sequence[Delivery], requeue: bool | None) -> None:
        channel = self._channel
        if generation != self._generation or channel is None or not channel.is_open:
            log.info("dropped %d acks: their channel is gone, the broker redelivers them", len(deliveries))
            return
        tags = [delivery.tag for delivery in deliveries if delivery.tag in self._unsettled]  # settled once
        if requeue is None:
            self._ack(channel, tags)
        else:
            for tag in tags:
                channel.basic_nack(tag, requeue=requeue)
        self._unsettled.difference_update(tags)

    def _ack(self, channel: Any, tags: list[int]) -> None:
        upto, singles = ack_frames(self._unsettled, tags)
        if upto:
            channel.basic_ack(upto, multiple=True)
        for tag in singles:
            channel.basic_ack(tag)

    # Other threads.

    def _settle(self, deliveries: Sequence[Delivery], requeue: bool | None) -> int:
        if not deliveries:
            return 0
        with self._lock:
            generation = self._generation if self._connection is not None else -1
        current = [d for d in deliveries if d.generation == generation]
        if len(current) < len(deliveries):
            log.info(
                "dropped %d acks from an earlier connection: the broker redelivers those messages",
                len(deliveries) - len(current),
            )
        if current and self._call_soon(partial(self._send, generation, current, requeue)):
            return len(current)
        return 0

    def _call_soon(self, callback: Callable[[], None]) -> bool:
        """Run `callback` on the link's thread; False when there is no connection to run it on."""
        with self._lock:
            connection = self._connection
            if connection is None:
                return False
            try:
                connection.add_callback_threadsafe(callback)
            except BROKER_ERRORS:
                return False
            return True

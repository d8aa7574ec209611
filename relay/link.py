"""One connection to the broker with one confirm-mode channel, driven by the relay's pika IOLoop.

The link declares the topology, publishes leased rows as persistent, mandatory messages to their job's
named queue, and reports back to its owner: `ready` once it can publish, a `Confirmation` per confirm, and
`down` exactly once when the connection fails to open or closes, with the messages that were still
unconfirmed.

A named queue other than `default` is declared on this connection before the first message to it: on a
channel of its own, so a declaration the broker refuses (a queue of that name declared with other
arguments) closes that channel only, and its rows come back refused (due again a little later) while the
other queues' rows go on. Its rows wait for the declaration, not on the wire: a publish sent behind a
pending declaration would reach the exchange before the binding does, and come back unroutable."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import pika
import pika.exceptions
from pika.adapters.select_connection import IOLoop
from pika.channel import Channel
from pika.spec import Basic

from outbox_bridge.broker import topology
from outbox_bridge.broker.message import CONTENT_TYPE, JobMessage, order_headers, trace_headers
from outbox_bridge.core.queue_names import DEFAULT_QUEUE
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore.outbox import Lease
from outbox_bridge.relay.window import Confirmation, ConfirmWindow, Sent
from outbox_bridge.telemetry import tracing

log = logging.getLogger("relay.link")


class LinkEvents(Protocol):
    def on_ready(self, link: BrokerLink) -> None: ...

    def on_confirmation(self, link: BrokerLink, confirmation: Confirmation) -> None: ...

    def on_down(self, link: BrokerLink, reason: str, unconfirmed: tuple[Sent, ...]) -> None: ...


def root_cause(error: BaseException | str) -> str:
    """The innermost reason pika wraps a failed connection in (e.g. `ConnectionRefusedError(111, ...)`)."""
    for _ in range(8):
        if isinstance(error, str):
            return error
        inner = getattr(error, "exceptions", None) or [getattr(error, "exception", None)]
        if inner[-1] is None and error.args and isinstance(error.args[0], BaseException):
            inner = [error.args[0]]
        if not isinstance(inner[-1], BaseException):
            break
        error = inner[-1]
    return repr(error)


def message_properties(
    outbox_id: int, traceparent: str | None = None, order: tuple[int, str] | None = None
) -> pika.BasicProperties:
    return pika.BasicProperties(
        delivery_mode=pika.DeliveryMode.Persistent,
        content_type=CONTENT_TYPE,
        message_id=str(outbox_id),
        headers={**(order_headers(*order) if order else {}), **(trace_headers(traceparent) or {})} or None,
    )


@dataclass(frozen=True)
class Row:
    """One leased row on its way to the broker: the message it becomes, and the token it is marked under."""

    outbox_id: int
    job_id: str
    token: str
    traceparent: str | None
    order: tuple[int, str] | None
    kind: str | None  # the job's kind, for its `publish` span

    def sent(self) -> Sent:
        return Sent(self.outbox_id, self.token)


def rows_of(lease: Lease) -> list[tuple[str, Row]]:
    """Each leased row with its job's named queue, in the lease's order."""
    return [
        (
            lease.queues.get(job_id, DEFAULT_QUEUE),
            Row(
                outbox_id,
                job_id,
                lease.token,
                lease.traceparents.get(job_id),
                lease.orders.get(outbox_id),
                lease.kinds.get(job_id),
            ),
        )
        for outbox_id, job_id in lease.rows
    ]


class BrokerLink:
    """A connection being opened, or open, to one node of the broker (`params`). Only the IOLoop's thread may
    touch it."""

    def __init__(
        self, settings: Settings, params: pika.URLParameters, ioloop: IOLoop, events: LinkEvents
    ) -> None:
        self.window = ConfirmWindow()
        self.params = params  # the node this link connects to
        self._settings = settings
        self._events = events
        self._channel: Channel | None = None
        self._down = False
        self._returns_logged = False
        self._declared = {DEFAULT_QUEUE}  # the named queues declared on this connection
        # Rows of the named queues being declared, in their order, by queue.
        self._awaiting: dict[str, list[Row]] = {}
        self._refusals_logged: set[str] = set()
        self._ioloop = ioloop
        self._connection = pika.SelectConnection(
            self.params,
            on_open_callback=self._on_open,
            on_open_error_callback=self._on_open_error,
            on_close_callback=self._on_closed,
            custom_ioloop=ioloop,
        )

    def publish(self, lease: Lease) -> list[Sent]:
        """Publish each leased row to its named queue (a queue not declared on this connection yet is
        declared first: its rows wait for that); returns the rows that could not be handed to the channel
        (it closed)."""
        rows = rows_of(lease)
        for index, (queue, row) in enumerate(rows):
            if queue not in self._declared:
                self._await_declaration(queue, row)
            elif not self._send(queue, row):
                return [later.sent() for _, later in rows[index:]]
        return []

    def _send(self, queue: str, row: Row) -> bool:
        """Put one row's message on the channel and into the confirm window; False when the channel is
        gone."""
        channel = self._channel
        try:
            if channel is None:
                raise pika.exceptions.ChannelWrongStateError("channel is not open")
            self._publish(channel, queue, row)
        except pika.exceptions.AMQPError:
            return False
        self.window.add(row.sent())
        return True

    def _publish(self, channel: Channel, queue: str, row: Row) -> None:
        """One message, under a `publish` span in the job's trace whose context it carries."""
        attributes = {"job.id": row.job_id, "messaging.message.id": str(row.outbox_id)}
        if row.kind is not None:
            attributes["job.kind"] = row.kind
        with tracing.span("publish", row.traceparent, "producer", attributes) as span:
            channel.basic_publish(
                self._settings.exchange,
                topology.routing_key(queue),
                JobMessage(row.job_id).encode(),
                message_properties(row.outbox_id, span.traceparent, row.order),
                mandatory=True,
            )

    # -- named queues declared on demand ---------------------------------------------------------------

    def _await_declaration(self, queue: str, row: Row) -> None:
        """Hold `row` until its queue is declared on this connection, asking for the declaration with the
        first row."""
        waiting = self._awaiting.setdefault(queue, [])
        waiting.append(row)
        if len(waiting) > 1:
            return
        clash = topology.clash(self._settings, queue)
        if clash is not None:  # refused on the loop's next turn: not inside the publisher's call
            self._ioloop.add_callback(partial(self._declaration_refused, queue, clash))
            return
        try:
            self._connection.channel(on_open_callback=partial(self._declare_queue, queue))
        except pika.exceptions.AMQPError:
            pass  # the connection is closing: `on_down` gives the rows back

    def _declare_queue(self, queue: str, channel: Channel) -> None:
        channel.add_on_close_callback(partial(self._on_declaring_channel_closed, queue))
        declarations = topology.queue_declarations(self._settings, queue)
        topology.run_async(channel, declarations, partial(self._queue_declared, queue, channel))

    def _queue_declared(self, queue: str, channel: Channel) -> None:
        """The broker took the declaration: publish what waited for it, in its order."""
        self._declared.add(queue)
        channel.close()
        log.info("declared queue %s", topology.queue_name(self._settings, queue))
        waiting = self._awaiting.pop(queue, [])
        for index, row in enumerate(waiting):
            if not self._send(queue, row):
                # The channel is gone and the connection with it: `on_down` gives the rest back.
                self._awaiting[queue] = waiting[index:]
                self.close()
                return

    def _on_declaring_channel_closed(self, queue: str, _channel: Channel, reason: BaseException) -> None:
        if isinstance(reason, pika.exceptions.ChannelClosedByBroker) and queue not in self._declared:
            self._declaration_refused(queue, str(reason))

    def _declaration_refused(self, queue: str, reason: str) -> None:
        """Its rows come back refused: due again a little later, when the declaration is asked for again."""
        refused = tuple(row.sent() for row in self._awaiting.pop(queue, []))
        if self._down or not refused:
            return
        if queue not in self._refusals_logged:
            self._refusals_logged.add(queue)
            log.warning("cannot declare queue %r: %s; its rows stay pending", queue, reason)
        self._events.on_confirmation(self, Confirmation((), refused))

    def read_depth(self, on_depth: Callable[[int], None]) -> bool:
        """Ask the broker how many messages are ready in the queue (a passive declare); `on_depth(count)`
        runs on the IOLoop with the answer. False when the channel is not open (no answer will come)."""
        channel = self._channel
        if channel is None or not channel.is_open:
            return False

        def answered(frame: pika.frame.Method) -> None:
            on_depth(int(frame.method.message_count))

        channel.queue_declare(self._settings.queue, passive=True, callback=answered)
        return True

    def close(self) -> None:
        """Close the connection (or abandon opening it); `on_down` follows. Idempotent."""
        if self._down or self._connection.is_closing or self._connection.is_closed:
            return
        try:
            self._connection.close()
        except pika.exceptions.ConnectionWrongStateError:
            pass

    def abandon(self, reason: str) -> None:
        """Give the link up without waiting for the broker (it stopped answering): `on_down` follows now,
        with every unconfirmed message."""
        self._went_down(reason)

    def _on_open(self, connection: pika.SelectConnection) -> None:
        connection.channel(on_open_callback=self._on_channel_open)

    def _on_channel_open(self, channel: Channel) -> None:
        self._channel = channel
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_return_callback(self._on_return)
        channel.confirm_delivery(self._on_confirm, callback=lambda _frame: self._declare(channel))

    def _declare(self, channel: Channel) -> None:
        topology.declare_async(channel, self._settings, on_done=lambda: self._events.on_ready(self))

    def _on_confirm(self, frame: pika.frame.Method) -> None:
        method = frame.method
        acked = isinstance(method, Basic.Ack)
        confirmation = self.window.confirm(method.delivery_tag, multiple=method.multiple, acked=acked)
        self._events.on_confirmation(self, confirmation)

    def _on_return(
        self, _channel: Channel, method: Basic.Return, properties: pika.BasicProperties, _body: bytes
    ) -> None:
        if not self._returns_logged:
            log.warning(
                "broker returned outbox row %s: %s %s (no queue bound to %r with key %r?); it stays pending",
                properties.message_id,
                method.reply_code,
                method.reply_text,
                self._settings.exchange,
                method.routing_key,
            )
            self._returns_logged = True
        if properties.message_id is not None:
            self.window.returned(int(properties.message_id))

    def _on_channel_closed(self, _channel: Channel, reason: BaseException) -> None:
        self._channel = None
        if not self._connection.is_closing and not self._connection.is_closed:
            log.warning("broker closed the channel: %s", reason)
            self.close()

    def _on_open_error(self, _connection: pika.SelectConnection, error: BaseException | str) -> None:
        self._went_down(f"cannot connect: {root_cause(error)}")

    def _on_closed(self, _connection: pika.SelectConnection, reason: BaseException) -> None:
        self._channel = None
        self._went_down(f"connection closed: {root_cause(reason)}")

    def _went_down(self, reason: str) -> None:
        if self._down:
            return
        self._down = True
        awaiting = tuple(row.sent() for rows in self._awaiting.values() for row in rows)
        self._awaiting.clear()
        self._events.on_down(self, reason, self.window.abandon() + awaiting)

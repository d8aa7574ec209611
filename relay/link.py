"""One connection to the broker with one confirm-mode channel, driven by the relay's pika IOLoop.

The link declares the topology, publishes leased rows as persistent, mandatory messages, and reports back
to its owner: `ready` once it can publish, a `Confirmation` per confirm, and `down` exactly once when the
connection fails to open or closes, with the messages that were still unconfirmed."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import pika
import pika.exceptions
from pika.adapters.select_connection import IOLoop
from pika.channel import Channel
from pika.spec import Basic

from outbox_bridge.broker import topology
from outbox_bridge.broker.message import CONTENT_TYPE, JobMessage, order_headers, trace_headers
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
        self._connection = pika.SelectConnection(
            self.params,
            on_open_callback=self._on_open,
            on_open_error_callback=self._on_open_error,
            on_close_callback=self._on_closed,
            custom_ioloop=ioloop,
        )

    def publish(self, lease: Lease) -> list[Sent]:
        """Publish each leased row; returns the rows that could not be handed to the channel (it closed)."""
        channel = self._channel
        for index, (outbox_id, job_id) in enumerate(lease.rows):
            try:
                if channel is None:
                    raise pika.exceptions.ChannelWrongStateError("channel is not open")
                self._publish(
                    channel, outbox_id, job_id, lease.traceparents.get(job_id), lease.orders.get(outbox_id)
                )
            except pika.exceptions.AMQPError:
                return [Sent(row_id, lease.token) for row_id, _ in lease.rows[index:]]
            self.window.add(Sent(outbox_id, lease.token))
        return []

    def _publish(
        self,
        channel: Channel,
        outbox_id: int,
        job_id: str,
        job_trace: str | None,
        order: tuple[int, str] | None,
    ) -> None:
        """One message, under a `publish` span in the job's trace whose context it carries."""
        attributes = {"job.id": job_id, "messaging.message.id": str(outbox_id)}
        with tracing.span("publish", job_trace, "producer", attributes) as span:
            channel.basic_publish(
                self._settings.exchange,
                topology.ROUTING_KEY,
                JobMessage(job_id).encode(),
                message_properties(outbox_id, span.traceparent, order),
                mandatory=True,
            )

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
                "broker returned outbox row %s: %s %s (no queue bound to %r?); it stays pending",
                properties.message_id,
                method.reply_code,
                method.reply_text,
                self._settings.exchange,
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
        self._events.on_down(self, reason, self.window.abandon())

"""The publisher-confirm window of one channel: which outbox row each delivery tag carries, until the broker
says what became of it.

RabbitMQ numbers the messages published on a confirm-mode channel 1, 2, 3, ... and answers with `Basic.Ack`
or `Basic.Nack`, either for one tag or (`multiple=True`) for every tag up to and including it. A message
that could not be routed (`mandatory=True`) first comes back as a `Basic.Return`, then is acked: an ack for a
returned message is not a delivery."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

from outbox_bridge.telemetry.instruments import PUBLISH_TO_CONFIRM


@dataclass(frozen=True)
class Sent:
    """One outbox row on the wire, under the lease token that lets us mark it."""

    outbox_id: int
    token: str
    # When it was put on the wire (monotonic seconds), for the publish-to-confirm histogram.
    sent_at: float = field(default_factory=time.monotonic, compare=False)


@dataclass(frozen=True)
class Confirmation:
    """What a confirm settled: rows the broker took, and rows it refused (nacked or returned)."""

    confirmed: tuple[Sent, ...]
    refused: tuple[Sent, ...]


class ConfirmWindow:
    """Unconfirmed messages of one channel, by delivery tag (tags grow; confirms may come out of order)."""

    def __init__(self) -> None:
        self._unconfirmed: OrderedDict[int, Sent] = OrderedDict()
        self._returned: set[int] = set()
        self._last_tag = 0

    def __len__(self) -> int:
        return len(self._unconfirmed)

    def add(self, sent: Sent) -> int:
        """Record a message just published; returns the delivery tag the broker will confirm it with."""
        self._last_tag += 1
        self._unconfirmed[self._last_tag] = sent
        return self._last_tag

    def oldest_age(self) -> float:
        """How long the oldest unconfirmed message has waited for its confirm, in seconds (0: none waits)."""
        if not self._unconfirmed:
            return 0.0
        return time.monotonic() - next(iter(self._unconfirmed.values())).sent_at

    def returned(self, outbox_id: int) -> None:
        """The broker could not route this row's message; its coming ack does not count."""
        self._returned.add(outbox_id)

    def confirm(self, delivery_tag: int, *, multiple: bool, acked: bool) -> Confirmation:
        """Settle `delivery_tag` (and every earlier tag when `multiple`). Tags already settled are ignored."""
        settled = self._take_through(delivery_tag) if multiple else self._take_one(delivery_tag)
        confirmed: list[Sent] = []
        refused: list[Sent] = []
        for sent in settled:
            was_returned = sent.outbox_id in self._returned
            self._returned.discard(sent.outbox_id)
            (confirmed if acked and not was_returned else refused).append(sent)
        now = time.monotonic()
        for sent in confirmed:
            PUBLISH_TO_CONFIRM.observe(now - sent.sent_at)
        return Confirmation(tuple(confirmed), tuple(refused))

    def abandon(self) -> tuple[Sent, ...]:
        """Forget every unconfirmed message (the channel is gone: its confirms will never come)."""
        lost = tuple(self._unconfirmed.values())
        self._unconfirmed.clear()
        self._returned.clear()
        return lost

    def _take_one(self, tag: int) -> list[Sent]:
        sent = self._unconfirmed.pop(tag, None)
        return [] if sent is None else [sent]

    def _take_through(self, tag: int) -> list[Sent]:
        taken: list[Sent] = []
        while self._unconfirmed:
            first = next(iter(self._unconfirmed))
            if first > tag:
                break
            taken.append(self._unconfirmed.popitem(last=False)[1])
        return taken

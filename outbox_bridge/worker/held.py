"""Deliveries a consumer has held too long: those the broker link says it has held past
`CONSUMER_DELIVERY_HOLD_SECONDS` (`consumer.link.DeliveryAges`) are settled before the broker's
`consumer_timeout` closes their channel, and never by giving them back to the queue (each return counts
toward the message's delivery limit)."""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable
from typing import Any

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import sweeper
from outbox_bridge.worker.counts import WriterCounts
from outbox_bridge.worker.modes import Acker
from outbox_bridge.worker.retry import PatientStore

log = logging.getLogger(__name__)


def held_past(delivery: Any, generation: int, upto: int) -> bool:
    """Whether `delivery` (a `consumer.link.Delivery`) is one of those the link said were held too long:
    of connection `generation`, with a tag up to `upto`."""
    return bool(delivery.generation == generation and delivery.tag <= upto)


def take_held(waiting: collections.deque[Any], generation: int, upto: int) -> list[Any]:
    """Take the deliveries of `waiting` held too long (`held_past`) out of it, in order; the rest stay, in
    theirs."""
    taken = [delivery for delivery in waiting if held_past(delivery, generation, upto)]
    if taken:
        kept = [delivery for delivery in waiting if not held_past(delivery, generation, upto)]
        waiting.clear()
        waiting.extend(kept)
    return taken


class HeldDeliveries:
    """What the link last said was held too long (`mark`, from its thread), settled by the store writer
    before its next round (`settle`)."""

    def __init__(self, settings: Settings, store: PatientStore, acker: Acker, counts: WriterCounts) -> None:
        self._hold_seconds = settings.consumer_delivery_hold_seconds
        self._store = store
        self._acker = acker
        self._counts = counts
        self._marked: tuple[int, int] | None = None  # (generation, tag): `mark`
        self._acked_early: set[Any] = set()  # of claimed jobs, by `settle`

    def mark(self, generation: int, upto: int) -> None:
        """The link's deliveries of connection `generation` up to tag `upto` have been held past the hold.
        Any thread."""
        self._marked = (generation, upto)

    @property
    def marked(self) -> bool:
        return self._marked is not None

    def settle(self, waiting: collections.deque[Any], claimed: Iterable[Any]) -> None:
        """Settle the marked deliveries among `claimed` (those of the jobs claimed here) and `waiting` (not
        claimed yet). A claimed job's delivery is acked: the store keeps the job safe (its lease, then the
        sweeper), and the ack its outcome would have sent is dropped by the link. A delivery still waiting
        to be claimed is acked once the store has given its job a new outbox row where it needs one (as for
        a dead letter: a queued job with none waiting to be published), so the relay delivers it again;
        while the store cannot take that, it waits on, and the link says so again."""
        assert self._marked is not None
        generation, upto = self._marked
        self._marked = None
        held = set(claimed)
        self._acked_early &= held
        early = [d for d in held - self._acked_early if held_past(d, generation, upto)]
        self._acked_early.update(early)
        taken = take_held(waiting, generation, upto)
        job_ids = [delivery.job_id for delivery in taken]
        if taken and self._store.transact(sweeper.settle_dead_letters, job_ids, clock.now()) is None:
            waiting.extendleft(reversed(taken))
            taken = []
        self._acker.ack([*early, *taken])
        self._counts.add(acked_early=len(early), announced_again=len(taken))
        log.info(
            "deliveries held past %.0fs acked: %d of claimed jobs, %d of jobs announced again",
            self._hold_seconds,
            len(early),
            len(taken),
        )

"""Writing back what the broker said about published rows: confirmed rows are marked published, refused ones
(nacked, returned) held back a little, and unsent ones (never confirmed, or read after the channel was gone)
left due. Writes run one at a time, on a store thread, beside the reads: a mark written with a read would
delay the read's rows by its time. Whatever arrives while a write runs goes into the next one, and confirmed
rows wait at most `SETTLE_DELAY_SECONDS` for more of them to gather into one write (`ledger.write_results`).

Until its result is written, a published row is `unsettled`: the leader's reads leave it out, so it is not
published again."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from functools import partial

from sqlalchemy import Engine

from outbox_bridge.core import clock, faults
from outbox_bridge.core.settings import Settings
from outbox_bridge.relay import ledger
from outbox_bridge.relay.counts import RelayCounts
from outbox_bridge.relay.ledger import PublishResults, WrittenBack
from outbox_bridge.relay.loop import RelayLoop
from outbox_bridge.relay.window import Confirmation, Sent

log = logging.getLogger("relay")

SETTLE_RETRY_SECONDS = 0.5
SETTLE_DELAY_SECONDS = 0.2


class WriteBack:
    """The publisher's results on their way to the store. `unsent_written()` runs on the loop when a write
    gave rows back as still due (to be read again); `due_at(at)` when rows held back come due at `at`."""

    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        loop: RelayLoop,
        counts: RelayCounts,
        *,
        unsent_written: Callable[[], None],
        due_at: Callable[[float], None],
    ) -> None:
        self._settings = settings
        self._engine = engine
        self._loop = loop
        self._counts = counts
        self._unsent_written = unsent_written
        self._due_at = due_at
        self._pending = PublishResults()
        self.unsettled: set[int] = set()  # published rows whose result is not written yet

    def published(self, outbox_ids: Iterable[int]) -> None:
        self.unsettled.update(outbox_ids)

    def unsent(self, sent: Iterable[Sent]) -> None:
        """Rows that were not confirmed: written back (given up as this relay's) at once."""
        self._pending.add_unsent(sent)
        self.settle()

    def confirmed(self, confirmation: Confirmation) -> None:
        """What a confirm settled: written at once when it refused rows, when the relay stops, or when a
        batch of confirmed rows has gathered; else soon, with what follows."""
        self._pending.add_confirmed(confirmation.confirmed)
        self._pending.add_refused(confirmation.refused)
        if (
            confirmation.refused
            or self._loop.stopping
            or self._pending.confirmed_count >= self._settings.relay_batch_size
        ):
            self.settle()
        else:
            self._loop.later("settle", SETTLE_DELAY_SECONDS, self.settle)

    def drain(self) -> bool:
        """While the relay stops: write what is pending. True once nothing is pending or being written."""
        if not self._pending and "settle" not in self._loop.busy:
            return True
        self.settle()
        return False

    def settle(self) -> None:
        """Write every result gathered so far in one transaction, unless a write is already running (its
        completion starts the next one, so results group while the store is busy)."""
        if "settle" in self._loop.busy or not self._pending:
            return
        self._loop.cancel("settle")
        batch, self._pending = self._pending, PublishResults()
        self._loop.in_store(
            "settle",
            partial(self._write, batch),
            then=partial(self._on_written, batch),
            on_error=partial(self._on_failed, batch),
        )

    def _write(self, batch: PublishResults) -> WrittenBack:
        """On a store thread. The fault point sits between the broker's confirm and the mark."""
        if batch.confirmed:
            faults.hit("relay.after_publish")
        return ledger.write_results(self._engine, batch, now=clock.now())

    def _on_written(self, batch: PublishResults, settled: WrittenBack) -> None:
        # Written back (or no longer this relay's to write): a read may find them again.
        for bucket in (batch.confirmed, batch.refused, batch.unsent):
            for ids in bucket.values():
                self.unsettled.difference_update(ids)
        if batch.unsent:  # still due: published again by the next read
            self._unsent_written()
        self._count(settled)
        if self._pending.refused or self._pending.unsent or self._loop.stopping:
            self.settle()
        elif self._pending:
            self._loop.later("settle", SETTLE_DELAY_SECONDS, self.settle)

    def _count(self, settled: WrittenBack) -> None:
        self._counts.marked += settled.marked
        self._counts.stale += settled.stale
        self._counts.released += settled.released
        if settled.released:  # no notification announces rows this relay gave back itself
            self._due_at(clock.now() + ledger.REFUSED_RETRY_SECONDS)
        if settled.stale:
            log.warning(
                "%d confirmed rows were no longer this relay's to mark (its lease or role was taken over, "
                "or the rows were dropped meanwhile): left as they are",
                settled.stale,
            )

    def _on_failed(self, batch: PublishResults) -> None:
        batch.merge(self._pending)
        self._pending = batch
        self._loop.later("settle", SETTLE_RETRY_SECONDS, self.settle)

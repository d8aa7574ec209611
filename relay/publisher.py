"""The publisher: due outbox rows -> RabbitMQ under publisher confirms, while this relay is the leader.

Every relay keeps a broker connection (`relay.connector`); only the leader (`relay.leader`) reads the due
rows and publishes them. A writer that commits outbox rows tells the relay (`relay.wake`), which reads
them at once; polling only finds rows nobody announced. At most `relay_window` messages are unconfirmed at a
time, and no more wait in the queue than the consumers will take soon (`relay.backpressure`). What the broker
said is written back in groups (`relay.writeback`): a row is marked published only after the broker
confirmed its message, and only under the role's token it was published under. A nacked or returned
message leaves its row pending (due again after a short delay); a connection lost with unconfirmed messages
leaves their rows due at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from sqlalchemy import Engine

from outbox_bridge.core.backoff import compute_backoff
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import drivers
from outbox_bridge.jobstore.outbox import Lease
from outbox_bridge.relay import ledger
from outbox_bridge.relay.backpressure import Backpressure
from outbox_bridge.relay.connector import Connector
from outbox_bridge.relay.counts import RelayCounts
from outbox_bridge.relay.leader import Leadership
from outbox_bridge.relay.link import BrokerLink
from outbox_bridge.relay.loop import RelayLoop
from outbox_bridge.relay.wake import Wakeups
from outbox_bridge.relay.window import Confirmation, Sent
from outbox_bridge.relay.writeback import WriteBack

log = logging.getLogger("relay")

STORE_RETRY_CAP_SECONDS = 2.0


class Publisher:
    """The relay's publishing service. `start()` connects and listens for committed rows; `begin_stop`
    stops reading and `drain` moves the shutdown on (`finish()` is asked to look again whenever it may have
    moved); `stop()` stops listening. Only the IOLoop's thread touches it."""

    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        loop: RelayLoop,
        leader: Leadership,
        counts: RelayCounts,
        *,
        finish: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.counts = counts
        self._loop = loop
        self._leader = leader
        self._finish = finish
        self.peak_unconfirmed = 0  # the most messages that were unconfirmed at once
        self.connector = Connector(settings, loop, self)
        self.wakeups = Wakeups(settings, loop.ioloop, self._on_notified)
        self._results = WriteBack(
            settings, engine, loop, counts, unsent_written=self.lease_again, due_at=self.wakeups.due_at
        )
        self._backpressure = Backpressure(settings.publish_ahead, settings.relay_batch_size)
        self._refill_at = max(1, min(settings.relay_batch_size, settings.relay_window) // 2)
        # The last read found fewer rows than asked: only a notification, a due timer or the poll reads again.
        self._drained = True
        # A notification said rows are due: the next read skips its look first (and one running reads again).
        self._notified = False
        # Reads of the due rows that failed in a row: their retry pause grows with these alone, not with the
        # failures of the relay's other store work (a store back after a restart is read again at once).
        self._lease_failures = 0

    def start(self) -> None:
        self._loop.ioloop.add_callback_threadsafe(self.connector.connect)
        self.wakeups.start()

    def stop(self) -> None:
        self.wakeups.stop()

    def begin_stop(self, grace: float) -> None:
        """Read no more; wait up to `grace` seconds for the outstanding confirms."""
        self._loop.cancel("poll")
        unconfirmed = self.connector.unconfirmed
        self.connector.begin_stop(grace)
        log.info("stopping: no more leasing; waiting up to %.1fs for %d confirms", grace, unconfirmed)

    def drain(self) -> bool:
        """Move the shutdown on: close the link once its confirms are in, then write back what they said.
        True once both are done."""
        return self.connector.drain() and self._results.drain()

    def lease_again(self) -> None:
        """Rows may be due that the last read did not find (the relay became the leader, or rows were
        given back): read as soon as the window has room."""
        self._drained = False
        self._lease_more()

    # -- the link's events (current link only, via the connector) ------------------------------------------

    def on_ready(self, link: BrokerLink) -> None:
        self._drained = False
        if self._leader.token is None:
            self._leader.tend()  # `lease_again` runs once this relay is the leader
        self._lease_more()

    def on_down(self, link: BrokerLink, reason: str, unconfirmed: tuple[Sent, ...]) -> None:
        self._backpressure.forget()
        self._results.unsent(unconfirmed)
        if self._loop.stopping:
            log.info("broker connection closed; %d unconfirmed rows go back to the outbox", len(unconfirmed))
            self._finish()

    def on_confirmation(self, link: BrokerLink, confirmation: Confirmation) -> None:
        self.counts.confirmed += len(confirmation.confirmed)
        self.counts.refused += len(confirmation.refused)
        self._results.confirmed(confirmation)
        if self._loop.stopping:
            self._finish()
        elif not self._drained:
            self._lease_more()

    # -- reading and publishing ----------------------------------------------------------------------------

    def _lease_more(self) -> None:
        """Read the next batch if the window has room for a worthwhile one."""
        link = self.connector.link
        if self._loop.stopping or not self.connector.ready or link is None or "lease" in self._loop.busy:
            return
        room = self.settings.relay_window - len(link.window)
        if room < self._refill_at:
            self._drained = False  # the window is full: the next confirms read again
            return
        room_ahead = self._backpressure.room()
        if room_ahead is None:  # the queue holds enough: the outbox keeps the rest, in its order
            self._hold(link)
            return
        limit = min(self.settings.relay_batch_size, room, room_ahead)
        idle, self._notified = self._drained and not self._notified, False
        token = self._leader.token
        if token is None or not self._leader.is_leader():
            return  # a standby: the leader publishes; `lease_again` runs once this relay leads
        # A round trip to a server, which may hang: not on the loop.
        if drivers.of(self.engine).calls_may_wait_on_network():
            exclude = frozenset(self._results.unsettled)
            read = partial(ledger.read_due, self.engine, self.settings, limit, token, exclude, idle=idle)
            self._loop.in_store(
                "lease", read, then=partial(self._on_leased, limit), on_error=self._on_lease_failed
            )
            return
        self._read_due(limit, token, idle)

    def _read_due(self, limit: int, token: str, idle: bool) -> None:
        """SQLite: the leader's read, on the loop's own thread. A WAL read waits for no writer and takes a
        fraction of a millisecond, less than the two thread hand-offs of a store call would add to every
        job's way (heartbeats wait for it no longer than for any other callback)."""
        try:
            # The set itself, not a copy: the read runs here, on the thread that changes it.
            exclude = self._results.unsettled
            leased = ledger.read_due(self.engine, self.settings, limit, token, exclude, idle=idle)
        except Exception as exc:
            self._loop.store_failed("lease", exc)
            self._on_lease_failed()
            return
        self._loop.store_succeeded()
        self._on_leased(limit, leased)

    def _hold(self, link: BrokerLink) -> None:
        """Read the queue's depth (at once, unless it was read within the last poll) and read rows when
        there is room."""
        if self._backpressure.reading:
            return
        self._loop.later("depth", self._backpressure.reading_delay(), partial(self._read_depth, link))

    def _read_depth(self, link: BrokerLink) -> None:
        if link is not self.connector.link or self._loop.stopping or self._backpressure.reading:
            return
        self._backpressure.begin_reading(len(link.window))
        if not link.read_depth(partial(self._on_depth, link)):
            self._backpressure.forget()

    def _on_depth(self, link: BrokerLink, ready: int) -> None:
        if link is not self.connector.link:
            return
        self._backpressure.read(ready)
        self._lease_more()

    def _on_lease_failed(self) -> None:
        self._lease_failures += 1
        self._loop.later("poll", self._lease_retry_delay(), self._lease_more)

    def _lease_retry_delay(self) -> float:
        """How long to wait before reading the due rows again after that read failed: from the poll's
        interval, doubling with each failure in a row, jittered, to a cap."""
        poll = self.settings.relay_poll_seconds
        return compute_backoff(self._lease_failures, base=poll, cap=max(poll, STORE_RETRY_CAP_SECONDS))

    def _on_leased(self, limit: int, leased: ledger.Leased) -> None:
        self._lease_failures = 0
        lease = leased.lease
        rows = lease.rows if lease is not None else ()
        if lease is not None and rows:
            self._publish(lease)
        self._drained = len(rows) < limit
        if leased.next_due is not None:  # a delayed row: read when it comes due, not at a later poll
            self.wakeups.due_at(leased.next_due)
        if self._drained and not self._notified:
            self._loop.later("poll", self.wakeups.poll_seconds, self._lease_more)
        else:
            self._lease_more()

    def _on_notified(self) -> None:
        """A writer committed rows that are due: read now (or again, once the running read is back)."""
        self._notified = True
        self._loop.cancel("poll")
        self._lease_more()

    def _publish(self, lease: Lease) -> None:
        link = self.connector.link
        if lease.token != self._leader.token or not self._leader.is_leader():
            return  # read under a role this relay no longer holds: the rows are still due, for the leader
        if self._loop.stopping or not self.connector.ready or link is None:
            unsent = [Sent(outbox_id, lease.token) for outbox_id, _ in lease.rows]
        else:
            unsent = link.publish(lease)
            self._backpressure.published(len(lease.rows) - len(unsent))
            self.peak_unconfirmed = max(self.peak_unconfirmed, len(link.window))
        self.counts.sent += len(lease.rows) - len(unsent)
        self._results.published(outbox_id for outbox_id, _ in lease.rows)
        if unsent:
            self._results.unsent(unsent)

"""The relay: due outbox rows -> RabbitMQ under publisher confirms, plus the store's housekeeping.

Everything that touches pika runs on one thread, the IOLoop's. Store calls (reading due rows on
PostgreSQL, writing what the broker said, sweeping) run on a small pool of store threads and hand their
results back to the loop with `add_callback_threadsafe`, so heartbeats keep flowing while the store is slow.

The promises:
- one relay at a time holds the relay role and publishes, from reads (`jobstore.relayrole`); the others
  stand by and take the role when its holder stops, dies or lets it expire;
- a row is marked published only after the broker confirmed its message, and only under the role's token
  it was published under (a relay whose role was taken over marks nothing);
- at most `relay_window` messages are unconfirmed at a time; confirms are written in groups;
- a writer that commits outbox rows notifies the relay (`relay.wake`), which reads them at once; polling only
  finds rows nobody announced;
- a nacked or returned message leaves its row pending (due again after a short delay); a connection lost
  with unconfirmed messages leaves their rows due at once;
- it connects to the first node of RABBITMQ_URL that answers; after a lost connection it tries the node
  after the lost one first; while no node answers it keeps trying them with bounded, jittered backoff and
  keeps sweeping expired jobs, pruning the outbox and applying the job retention;
- while it is reachable, messages dead-lettered into `jobs.dead` are settled from the store every
  `DEAD_LETTER_CHECK_SECONDS` (`relay.deadletters`): a job still queued is announced again;
- the role's holder also sends completion webhooks (`relay.webhook_sender`);
- the role's holder fires the schedules' due slots, each a job under its slot's key (`relay.schedules`);
- `request_stop` stops reading, waits (bounded) for outstanding confirms, writes what was confirmed,
  hands the role back and closes the connection.
"""

from __future__ import annotations

import contextlib
import logging
from functools import partial

import pika
from sqlalchemy import Engine

from outbox_bridge.broker.connection import BROKER_ERRORS, BrokerNodes, broker_addresses, describe, node_of
from outbox_bridge.core import clock, faults
from outbox_bridge.core.backoff import compute_backoff
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import drivers, relayrole
from outbox_bridge.jobstore.outbox import Lease
from outbox_bridge.relay import ledger, schedules
from outbox_bridge.relay.backpressure import Backpressure
from outbox_bridge.relay.counts import Progress, RelayCounts
from outbox_bridge.relay.deadletters import Checked, DeadLetterCheck
from outbox_bridge.relay.housekeeping import Housekept, sweep_and_prune
from outbox_bridge.relay.ledger import PublishResults, WrittenBack
from outbox_bridge.relay.link import BrokerLink
from outbox_bridge.relay.loop import LoopWork
from outbox_bridge.relay.wake import Wakeups
from outbox_bridge.relay.webhook_sender import WebhookSender
from outbox_bridge.relay.window import Confirmation, Sent
from outbox_bridge.telemetry.instruments import BROKER_RECONNECTS
from outbox_bridge.worker.retention import OutputSweep, Retained, retain

log = logging.getLogger("relay")

RECONNECT_BASE_SECONDS = 0.25
RECONNECT_CAP_SECONDS = 4.0
STOP_CHECK_SECONDS = 0.1
REPORT_EVERY_SECONDS = 5.0
SETTLE_RETRY_SECONDS = 0.5
# Confirmed rows wait at most this long to be marked, for more of them to gather into one write (the role's
# reads leave them out meanwhile, so they are not published again).
SETTLE_DELAY_SECONDS = 0.2
STORE_RETRY_CAP_SECONDS = 2.0
LINK_CLOSE_TIMEOUT_SECONDS = 3.0
# After the confirm grace, how much longer shutdown may take to write back before the loop is stopped.
WRITE_BACK_GRACE_SECONDS = 10.0
# The relay role is held this long from each renewal; its holder looks every `ROLE_TEND_SECONDS`
# and renews once less than `ROLE_RENEW_SECONDS` is left (a standby looks as often, with a read, and takes
# the role at once when its holder is gone: `relayrole.RoleClaim`); nothing is published under it in its
# last `ROLE_MARGIN_SECONDS`.
ROLE_SECONDS = 5.0
ROLE_TEND_SECONDS = 0.1
ROLE_RENEW_SECONDS = 3.0
ROLE_MARGIN_SECONDS = 1.0


class Relay(LoopWork):
    """One relay process's publishing loop. Construct, then `run()` on the thread that owns it."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        super().__init__()
        self.settings = settings
        self.engine = engine
        self.counts = RelayCounts()
        self.clean_exit = True
        # The most messages that were unconfirmed at once.
        self.peak_unconfirmed = 0
        blocked = settings.relay_lease_seconds / 2
        self._nodes = BrokerNodes(
            broker_addresses(settings.rabbitmq_url, name="relay", blocked_timeout=blocked)
        )
        # The nodes this round of connection attempts has yet to try; a round that reaches none backs off.
        self._untried: list[pika.URLParameters] = []
        self._link: BrokerLink | None = None
        self._ready = False
        self._pending = PublishResults()
        # The last lease found fewer rows than asked: only a notification, a due timer or the poll leases
        # again.
        self._drained = True
        # A notification said rows are due: the next lease skips its look first (and one running leases
        # again).
        self._notified = False
        self._wakeups = Wakeups(settings, self.ioloop, self._on_notified)
        self._refill_at = max(1, min(settings.relay_batch_size, settings.relay_window) // 2)
        # Confirms are written on their own, beside the reads (`_settle`): a mark written with a read would
        # delay the read's rows by its time.
        # Only the holder of the relay role publishes, from reads (`jobstore.relayrole`); no lease writes on
        # the way of a job. Its token, until when it holds it, and the rows it published and has not written
        # back yet (a read leaves them out).
        self._role_token: str | None = None
        self._role_until = 0.0
        self._role_claim = relayrole.RoleClaim(engine, ROLE_SECONDS)
        self._unsettled: set[int] = set()
        # Reads of the due rows that failed in a row: their retry pause grows with these alone, not with the
        # failures of the relay's other store work (a store back after a restart is read again at once).
        self._lease_failures = 0
        self._backpressure = Backpressure(settings.publish_ahead, settings.relay_batch_size)
        self._failures = 0
        self._stop_requested = False
        self._stopping = False
        self._progress = Progress(self.counts)
        self._dead_letters = DeadLetterCheck(settings, engine)
        self._output_sweep = OutputSweep()
        # Completion webhooks: sent by the role's holder only, on threads of their own.
        self._webhooks = WebhookSender(settings, engine, self._holds_role)

    # -- lifecycle -----------------------------------------------------------------------------------------

    def run(self) -> RelayCounts:
        """Publish until `request_stop`; returns what was done."""
        log.info(
            "relay starting: broker %s, exchange %r, window %d, batch %d",
            ", ".join(describe(params) for params in self._nodes.addresses),
            self.settings.exchange,
            self.settings.relay_window,
            self.settings.relay_batch_size,
        )
        self.ioloop.add_callback_threadsafe(self._connect)
        self._wakeups.start()
        self._every(STOP_CHECK_SECONDS, self._check_stop)
        self._every(self.settings.sweep_interval_seconds, self._housekeep)
        self._every(self.settings.retention_check_seconds, self._retain)
        self._every(self.settings.dead_letter_check_seconds, self._check_dead_letters)
        self._every(schedules.CHECK_SECONDS, self._fire_schedules)
        self._every(REPORT_EVERY_SECONDS, self._report)
        self.ioloop.add_callback_threadsafe(self._tend_role)
        self._every(ROLE_TEND_SECONDS, self._tend_role)
        self._webhooks.start()
        try:
            self._serve()
        finally:
            self._webhooks.stop()
            self._wakeups.stop()
            self._store.shutdown(wait=True)
            self._dead_letters.close()
            self.ioloop.close()
            self._give_up_role()
            self._role_claim.close()
        self._report()
        log.info("relay stopped (%s): %s", "clean" if self.clean_exit else "forced", self.counts.line())
        return self.counts

    def _serve(self) -> None:
        """Run the loop until it is stopped. pika can raise out of the loop from inside a connection it is
        opening (seen: a socket reset between its connect and its `getpeername`); that connection is given
        up, a new one follows as after any loss, and the loop runs on."""
        while True:
            try:
                self.ioloop.start()
                return
            except Exception:
                if self._stopped:
                    raise
                log.exception("the broker connection failed inside pika; giving it up and reconnecting")
                link = self._link
                if link is not None:
                    with contextlib.suppress(Exception):  # whatever state pika left it in
                        link.close()
                    link.abandon("pika raised while serving the connection")

    @property
    def publishing(self) -> bool:
        """This relay may publish: it holds the relay role."""
        return self._holds_role()

    @property
    def connected(self) -> bool:
        """The broker connection is up, its channel in confirm mode and the topology declared."""
        return self._ready

    @property
    def node(self) -> str | None:
        """The node the relay is connected to (`host:port`), None while it is not."""
        link = self._link
        return node_of(link.params) if link is not None and self._ready else None

    def request_stop(self) -> None:
        """Ask the relay to shut down. Safe from signal handlers and other threads: it only sets a flag,
        which the loop looks at every `STOP_CHECK_SECONDS`."""
        self._stop_requested = True

    # -- the broker connection -----------------------------------------------------------------------------

    def _connect(self) -> None:
        if self._stopping:
            return
        if not self._untried:
            self._untried = self._nodes.in_order()
        self._link = BrokerLink(self.settings, self._untried.pop(0), self.ioloop, self)

    def on_ready(self, link: BrokerLink) -> None:
        if link is not self._link:
            return
        self._ready = True
        self._failures = 0
        self._untried = []
        log.info("broker connection up: %s; topology declared", describe(link.params))
        if self._stopping:
            self._close_link()
            return
        self._drained = False
        if self._role_token is None:
            self._tend_role()  # `_on_role` leases once the role is this relay's
        self._lease_more()

    def on_down(self, link: BrokerLink, reason: str, unconfirmed: tuple[Sent, ...]) -> None:
        if link is not self._link:
            return
        was_ready, self._link, self._ready = self._ready, None, False
        self._backpressure.forget()
        self._pending.add_unsent(unconfirmed)
        self._settle()
        if self._stopping:
            log.info("broker connection closed; %d unconfirmed rows go back to the outbox", len(unconfirmed))
            self._maybe_finish()
            return
        if was_ready:
            self._nodes.lost(link.params)  # the next round tries the node after it first
            self._untried = []
        elif self._untried:  # this node did not answer: the round goes on with the next one at once
            log.info("broker node %s unreachable (%s); trying the next", describe(link.params), reason)
            self._later("reconnect", 0.0, self._connect)
            return
        self._failures += 1
        BROKER_RECONNECTS.inc()
        delay = compute_backoff(self._failures, base=RECONNECT_BASE_SECONDS, cap=RECONNECT_CAP_SECONDS)
        if was_ready:
            log.warning(
                "broker connection lost (%s); %d unconfirmed rows go back to the outbox; "
                "reconnecting in %.2fs",
                reason,
                len(unconfirmed),
                delay,
            )
        elif self._failures <= 3 or self._failures % 10 == 0:
            # A long outage logs its first attempts, then every tenth.
            attempt = self._failures
            log.warning("broker unreachable (%s), attempt %d; reconnecting in %.2fs", reason, attempt, delay)
        self._later("reconnect", delay, self._connect)

    # -- leasing and publishing ----------------------------------------------------------------------------

    def _lease_more(self) -> None:
        """Lease the next batch if the window has room for a worthwhile one."""
        link = self._link
        if self._stopping or not self._ready or link is None or "lease" in self._busy:
            return
        room = self.settings.relay_window - len(link.window)
        if room < self._refill_at:
            self._drained = False  # the window is full: the next confirms lease again
            return
        room_ahead = self._backpressure.room()
        if room_ahead is None:  # the queue holds enough: the outbox keeps the rest, in its order
            self._hold(link)
            return
        limit = min(self.settings.relay_batch_size, room, room_ahead)
        idle, self._notified = self._drained and not self._notified, False
        token = self._role_token
        if token is None or not self._holds_role():
            return  # a standby: the holder publishes; `_on_role` leases once this relay holds the role
        if drivers.of(
            self.engine
        ).calls_may_wait_on_network():  # a round trip to a server, which may hang: not on the loop
            read = partial(
                ledger.read_due,
                self.engine,
                self.settings,
                limit,
                token,
                frozenset(self._unsettled),
                idle=idle,
            )
            self._in_store(
                "lease", read, then=partial(self._on_leased, limit), on_error=self._on_lease_failed
            )
            return
        self._read_due(limit, token, idle)

    def _read_due(self, limit: int, token: str, idle: bool) -> None:
        """SQLite: the relay role's lease, a read on the loop's own thread. A WAL read waits for no writer and
        takes a fraction of a millisecond, less than the two thread hand-offs of a store call would add to
        every job's way (heartbeats wait for it no longer than for any other callback)."""
        try:
            # The set itself, not a copy: the read runs here, on the thread that changes it.
            leased = ledger.read_due(self.engine, self.settings, limit, token, self._unsettled, idle=idle)
        except Exception as exc:
            self._store_failed("lease", exc)
            self._on_lease_failed()
            return
        self._store_failures = 0
        self._on_leased(limit, leased)

    def _hold(self, link: BrokerLink) -> None:
        """Read the queue's depth (at once, unless it was read within the last poll) and lease when there
        is room."""
        if self._backpressure.reading:
            return
        self._later("depth", self._backpressure.reading_delay(), partial(self._read_depth, link))

    def _read_depth(self, link: BrokerLink) -> None:
        if link is not self._link or self._stopping or self._backpressure.reading:
            return
        self._backpressure.begin_reading(len(link.window))
        if not link.read_depth(partial(self._on_depth, link)):
            self._backpressure.forget()

    def _on_depth(self, link: BrokerLink, ready: int) -> None:
        if link is not self._link:
            return
        self._backpressure.read(ready)
        self._lease_more()

    def _on_lease_failed(self) -> None:
        self._lease_failures += 1
        self._later("poll", self._lease_retry_delay(), self._lease_more)

    def _on_leased(self, limit: int, leased: ledger.Leased) -> None:
        self._lease_failures = 0
        lease = leased.lease
        rows = lease.rows if lease is not None else ()
        if lease is not None and rows:
            self._publish(lease)
        self._drained = len(rows) < limit
        if leased.next_due is not None:  # a delayed row: leased when it comes due, not at a later poll
            self._wakeups.due_at(leased.next_due)
        if self._drained and not self._notified:
            self._later("poll", self._wakeups.poll_seconds, self._lease_more)
        else:
            self._lease_more()

    def _on_notified(self) -> None:
        """A writer committed rows that are due: lease now (or again, once the running lease is back)."""
        self._notified = True
        self._cancel("poll")
        self._lease_more()

    def _publish(self, lease: Lease) -> None:
        link = self._link
        if lease.token != self._role_token or not self._holds_role():
            return  # read under a role this relay no longer holds: the rows are still due, for the holder
        if self._stopping or not self._ready or link is None:
            unsent = [Sent(outbox_id, lease.token) for outbox_id, _ in lease.rows]
        else:
            unsent = link.publish(lease)
            self._backpressure.published(len(lease.rows) - len(unsent))
            self.peak_unconfirmed = max(self.peak_unconfirmed, len(link.window))
        self.counts.sent += len(lease.rows) - len(unsent)
        self._unsettled.update(outbox_id for outbox_id, _ in lease.rows)
        if unsent:
            self._pending.add_unsent(unsent)
            self._settle()

    def on_confirmation(self, link: BrokerLink, confirmation: Confirmation) -> None:
        if link is not self._link:
            return
        self._pending.add_confirmed(confirmation.confirmed)
        self._pending.add_refused(confirmation.refused)
        self.counts.confirmed += len(confirmation.confirmed)
        self.counts.refused += len(confirmation.refused)
        if (
            confirmation.refused
            or self._stopping
            or self._pending.confirmed_count >= self.settings.relay_batch_size
        ):
            self._settle()
        else:  # more gather; soon they are written, together
            self._later("settle", SETTLE_DELAY_SECONDS, self._settle)
        if self._stopping:
            self._maybe_finish()
        elif not self._drained:
            self._lease_more()

    # -- writing confirmations back ---------------------------------------------------------------------

    def _settle(self) -> None:
        """Write every confirmation gathered so far in one transaction, unless a write is already running (its
        completion starts the next one, so confirmations group while SQLite is busy)."""
        if "settle" in self._busy or not self._pending:
            return
        self._cancel("settle")
        batch, self._pending = self._pending, PublishResults()
        self._in_store(
            "settle",
            partial(self._write_results, batch),
            then=partial(self._on_written, batch),
            on_error=partial(self._on_settle_failed, batch),
        )

    def _write_results(self, batch: PublishResults) -> WrittenBack:
        """On a store thread. The fault point sits between the broker's confirm and the mark."""
        if batch.confirmed:
            faults.hit("relay.after_publish")
        return ledger.write_results(self.engine, batch, now=clock.now())

    def _on_written(self, batch: PublishResults, settled: WrittenBack) -> None:
        # Written back (or no longer this relay's to write): a read may find them again.
        for bucket in (batch.confirmed, batch.refused, batch.unsent):
            for ids in bucket.values():
                self._unsettled.difference_update(ids)
        if batch.unsent:  # still due: published again by the next read
            self._drained = False
            self._lease_more()
        self._on_settled(settled)

    def _on_settled(self, settled: WrittenBack) -> None:
        self.counts.marked += settled.marked
        self.counts.stale += settled.stale
        self.counts.released += settled.released
        if settled.released:  # no notification announces rows this relay gave back itself
            self._wakeups.due_at(clock.now() + ledger.REFUSED_RETRY_SECONDS)
        if settled.stale:
            log.warning(
                "%d confirmed rows were no longer this relay's to mark (its lease or role was taken over, "
                "or the rows were dropped meanwhile): left as they are",
                settled.stale,
            )
        if self._pending.refused or self._pending.unsent or self._stopping:
            self._settle()
        elif self._pending:
            self._later("settle", SETTLE_DELAY_SECONDS, self._settle)

    def _on_settle_failed(self, batch: PublishResults) -> None:
        batch.merge(self._pending)
        self._pending = batch
        self._later("settle", SETTLE_RETRY_SECONDS, self._settle)

    # -- the relay role ---------------------------------------------------------------------------------

    def _holds_role(self) -> bool:
        return self._role_token is not None and clock.now() < self._role_until - ROLE_MARGIN_SECONDS

    def _tend_role(self) -> None:
        """Renew the role, or, standing by, take it if its holder let it expire or is gone. Only a relay
        whose broker connection is up and confirming holds it: one that lost its connection, or has waited
        `relay_lease_seconds` for a confirm (as long as a row lease would last), hands it back for a
        standby to take."""
        if self._stopping or "role" in self._busy:
            return
        link = self._link
        stuck = (
            link is None or not self._ready or link.window.oldest_age() > self.settings.relay_lease_seconds
        )
        if stuck:
            if self._role_token is not None:
                log.warning(
                    "handing back the relay role: %s",
                    "no broker connection" if link is None or not self._ready else "confirms stopped coming",
                )
                token, self._role_token, self._role_until = self._role_token, None, 0.0
                self._in_store("role", partial(self._release_role, token), then=lambda _: None)
            return
        if self._role_token is not None and self._role_until - clock.now() > ROLE_RENEW_SECONDS:
            return
        self._in_store(
            "role",
            partial(self._take_or_renew, self._role_token),
            then=self._on_role,
            on_error=self._on_role_failed,
        )

    def _take_or_renew(self, token: str | None) -> tuple[str | None, float]:
        """On a store thread: the token this relay holds the role under and until when, or (None, 0)."""
        return self._role_claim.take_or_renew(token)

    def _on_role(self, held: tuple[str | None, float]) -> None:
        token, until = held
        if self._stopping:
            self._role_token, self._role_until = token, until  # given up as the relay stops
            return
        if token is None:
            if self._role_token is not None:
                log.warning("the relay role passed to another relay: standing by")
            self._role_token, self._role_until = None, 0.0
            return
        fresh, was_held = token != self._role_token, self._holds_role()
        self._role_token, self._role_until = token, until
        if fresh:
            log.info("holding the relay role: this relay publishes the outbox")
        if fresh or not was_held:  # taken, or renewed after it had run out (a stopped process): lease again
            self._drained = False
            self._lease_more()

    def _on_role_failed(self) -> None:
        if self._role_token is not None and not self._holds_role():
            log.warning("could not renew the relay role in time: no publishing until it is renewed")

    def _give_up_role(self) -> None:
        """Hand the role back as the relay stops, so a standby takes it at its next look."""
        token, self._role_token = self._role_token, None
        if token is not None:
            self._release_role(token)

    def _release_role(self, token: str) -> None:
        try:
            self._role_claim.give_up(token)
        except Exception as exc:  # the role then expires by itself
            log.warning("could not hand back the relay role (%s): it expires within %.0fs", exc, ROLE_SECONDS)

    # -- housekeeping --------------------------------------------------------------------------------------

    def _housekeep(self) -> None:
        if "housekeeping" not in self._busy and not self._stopping:
            work = partial(sweep_and_prune, self.engine, self.settings)
            self._in_store("housekeeping", work, then=self._on_housekept)

    def _on_housekept(self, done: Housekept) -> None:
        for line in done.lines():
            log.info("%s", line)

    def _retain(self) -> None:
        if "retention" not in self._busy and not self._stopping:
            work = partial(retain, self.engine, self.settings, self._output_sweep)
            self._in_store("retention", work, then=self._on_retained)

    def _on_retained(self, done: Retained) -> None:
        for line in done.lines():
            log.info("%s", line)

    def _fire_schedules(self) -> None:
        """Only the role's holder fires; the slots' keys keep a second firing from making anything."""
        if "schedules" not in self._busy and not self._stopping and self._holds_role():
            work = partial(schedules.fire_due, self.engine, self.settings)
            self._in_store("schedules", work, then=schedules.report)

    def _check_dead_letters(self) -> None:
        if "dead letters" not in self._busy and self._ready and not self._stopping:
            self._in_store("dead letters", self._settle_dead_letters, then=self._on_dead_letters)

    def _settle_dead_letters(self) -> Checked | None:
        """On a store thread; a broker failure is logged here (the store's are counted by the loop)."""
        try:
            return self._dead_letters.check()
        except BROKER_ERRORS as exc:
            log.warning("dead-letter check: broker connection failed: %r", exc)
            return None

    def _on_dead_letters(self, checked: Checked | None) -> None:
        line = checked.line() if checked is not None else None
        if line is not None:
            log.info("%s", line)

    # -- store threads -------------------------------------------------------------------------------------

    def _after_store(self) -> None:
        if self._stopping:
            self._maybe_finish()

    def _lease_retry_delay(self) -> float:
        """How long to wait before reading the due rows again after that read failed: from the poll's
        interval, doubling with each failure in a row, jittered, to a cap."""
        poll = self.settings.relay_poll_seconds
        return compute_backoff(self._lease_failures, base=poll, cap=max(poll, STORE_RETRY_CAP_SECONDS))

    # -- shutdown and reporting ----------------------------------------------------------------------------

    def _check_stop(self) -> None:
        if self._stop_requested and not self._stopping:
            self._begin_shutdown()

    def _begin_shutdown(self) -> None:
        self._stopping = True
        self._cancel("poll")
        self._cancel("reconnect")
        grace = self.settings.shutdown_grace_seconds
        unconfirmed = len(self._link.window) if self._link is not None else 0
        log.info("stopping: no more leasing; waiting up to %.1fs for %d confirms", grace, unconfirmed)
        self.ioloop.call_later(grace, self._stop_waiting_for_confirms)
        self.ioloop.call_later(grace + WRITE_BACK_GRACE_SECONDS, self._force_stop)
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        """Move shutdown on: close the link once its confirms are in, then write back, then stop."""
        if self._stopped:
            return
        link = self._link
        if link is not None:
            if not self._ready or len(link.window) == 0:
                self._close_link()
            return
        if self._pending or "settle" in self._busy:
            self._settle()
            return
        if self._busy:
            return
        self._stopped = True
        self.ioloop.stop()

    def _stop_waiting_for_confirms(self) -> None:
        if self._link is not None and not self._stopped:
            unconfirmed = len(self._link.window)
            log.warning("%d messages still unconfirmed at the deadline: releasing them", unconfirmed)
            self._close_link()

    def _close_link(self) -> None:
        """Close the connection; if the broker does not answer the close in time, give the link up."""
        if self._link is None:
            return
        self._link.close()
        self._later("abandon", LINK_CLOSE_TIMEOUT_SECONDS, self._abandon_link)

    def _abandon_link(self) -> None:
        if self._link is not None:
            self._link.abandon(f"the broker did not answer the close within {LINK_CLOSE_TIMEOUT_SECONDS}s")

    def _force_stop(self) -> None:
        if self._stopped:
            return
        log.error("shutdown could not write everything back in time; leases left will expire")
        self.clean_exit = False
        self._stopped = True
        self.ioloop.stop()

    def _report(self) -> None:
        line = self._progress.report()
        if line is not None:
            log.info("%s", line)

"""The relay: due outbox rows -> RabbitMQ under publisher confirms, plus the leader's chores and the store's
housekeeping, each a service (`relay.services`) on one event loop.

Everything that touches pika runs on one thread, the IOLoop's. Store calls (reading due rows on
PostgreSQL, writing what the broker said, sweeping) run on a small pool of store threads and hand their
results back to the loop with `add_callback_threadsafe`, so heartbeats keep flowing while the store is slow.

The promises:
- one relay at a time holds the relay role and is the leader (`relay.leader`); the others stand by and take
  the role when its holder stops, dies or lets it expire;
- the leader publishes the outbox (`relay.publisher`): a row is marked published only after the broker
  confirmed its message, and only under the role's token it was published under (a relay whose role was
  taken over marks nothing); at most `relay_window` messages are unconfirmed at a time;
- it connects to the first node of RABBITMQ_URL that answers, and reconnects with bounded, jittered backoff
  (`relay.connector`); meanwhile every relay keeps sweeping expired jobs, pruning the outbox
  (`relay.housekeeping`) and applying the job retention (`relay.retention`);
- while it is reachable, messages dead-lettered into `jobs.dead` are settled from the store every
  `DEAD_LETTER_CHECK_SECONDS` (`relay.deadletters`): a job still queued is announced again;
- the leader also sends completion webhooks (`relay.webhook_sender`) and fires the schedules' due slots,
  each a job under its slot's key, after bringing in the schedules its kinds modules declare each time it
  takes the role (`relay.schedules`);
- `request_stop` stops reading, waits (bounded) for outstanding confirms, writes what was confirmed,
  hands the role back and closes the connection.
"""

from __future__ import annotations

import logging

from sqlalchemy import Engine

from outbox_bridge.broker.connection import describe
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.schedules import DECLARED
from outbox_bridge.relay.counts import Progress, RelayCounts
from outbox_bridge.relay.deadletters import DeadLetterReconciler
from outbox_bridge.relay.housekeeping import Rescuer
from outbox_bridge.relay.leader import Leadership
from outbox_bridge.relay.loop import RelayLoop
from outbox_bridge.relay.publisher import Publisher
from outbox_bridge.relay.retention import Pruner
from outbox_bridge.relay.schedules import Scheduler
from outbox_bridge.relay.services import Service
from outbox_bridge.relay.webhook_sender import WebhookSender

log = logging.getLogger("relay")

STOP_CHECK_SECONDS = 0.1
REPORT_EVERY_SECONDS = 5.0
# After the confirm grace, how much longer shutdown may take to write back before the loop is stopped.
WRITE_BACK_GRACE_SECONDS = 10.0


class Relay:
    """One relay process: its loop, its leadership and its services. Construct, then `run()` on the thread
    that owns it."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        self.settings = settings
        self.counts = RelayCounts()
        self.clean_exit = True
        self._stop_requested = False
        self.loop = RelayLoop(after_store=self._after_store)
        self.leadership = Leadership(
            engine, self.loop, trouble=self._leader_trouble, elected=self._on_elected
        )
        self.publisher = Publisher(
            settings, engine, self.loop, self.leadership, self.counts, finish=self._maybe_finish
        )
        self._progress = Progress(self.counts)
        # What the kinds modules loaded before this relay was made declare (`outbox_bridge.schedule`).
        self.scheduler = Scheduler(
            settings, engine, self.loop, self.leadership.is_leader, declared=DECLARED.values()
        )
        # Started in this order, stopped in the reverse one.
        self._services: list[Service] = [
            self.publisher,
            Rescuer(settings, engine, self.loop),
            Pruner(settings, engine, self.loop),
            DeadLetterReconciler(settings, engine, self.loop, connected=self._connected),
            self.scheduler,
            # Completion webhooks: sent by the leader only, on threads of their own.
            WebhookSender(settings, engine, self.leadership.is_leader),
        ]

    # -- lifecycle -----------------------------------------------------------------------------------------

    def run(self) -> RelayCounts:
        """Publish until `request_stop`; returns what was done."""
        log.info(
            "relay starting: broker %s, exchange %r, window %d, batch %d",
            ", ".join(describe(params) for params in self.publisher.connector.nodes.addresses),
            self.settings.exchange,
            self.settings.relay_window,
            self.settings.relay_batch_size,
        )
        for service in self._services:
            service.start()
        self.loop.every(STOP_CHECK_SECONDS, self._check_stop)
        self.loop.every(REPORT_EVERY_SECONDS, self._report)
        self.leadership.start()
        try:
            self._serve()
        finally:
            for service in reversed(self._services):
                service.stop()
            self.loop.close()
            self.leadership.stop()
        self._report()
        log.info("relay stopped (%s): %s", "clean" if self.clean_exit else "forced", self.counts.line())
        return self.counts

    def _serve(self) -> None:
        """Run the loop until it is stopped. pika can raise out of the loop from inside a connection it is
        opening (seen: a socket reset between its connect and its `getpeername`); that connection is given
        up, a new one follows as after any loss, and the loop runs on."""
        while True:
            try:
                self.loop.ioloop.start()
                return
            except Exception:
                if self.loop.stopped:
                    raise
                log.exception("the broker connection failed inside pika; giving it up and reconnecting")
                self.publisher.connector.drop("pika raised while serving the connection")

    @property
    def publishing(self) -> bool:
        """This relay may publish: it is the leader."""
        return self.leadership.is_leader()

    @property
    def connected(self) -> bool:
        """The broker connection is up, its channel in confirm mode and the topology declared."""
        return self.publisher.connector.ready

    @property
    def node(self) -> str | None:
        """The node the relay is connected to (`host:port`), None while it is not."""
        return self.publisher.connector.node

    @property
    def peak_unconfirmed(self) -> int:
        """The most messages that were unconfirmed at once."""
        return self.publisher.peak_unconfirmed

    def request_stop(self) -> None:
        """Ask the relay to shut down. Safe from signal handlers and other threads: it only sets a flag,
        which the loop looks at every `STOP_CHECK_SECONDS`."""
        self._stop_requested = True

    # -- leadership ----------------------------------------------------------------------------------------

    def _connected(self) -> bool:
        return self.publisher.connector.ready

    def _leader_trouble(self) -> str | None:
        return self.publisher.connector.trouble()

    def _on_elected(self) -> None:
        self.publisher.lease_again()
        self.scheduler.elected()

    # -- shutdown and reporting ----------------------------------------------------------------------------

    def _after_store(self) -> None:
        if self.loop.stopping:
            self._maybe_finish()

    def _check_stop(self) -> None:
        if self._stop_requested and not self.loop.stopping:
            self._begin_shutdown()

    def _begin_shutdown(self) -> None:
        self.loop.stopping = True
        grace = self.settings.shutdown_grace_seconds
        self.publisher.begin_stop(grace)
        self.loop.ioloop.call_later(grace + WRITE_BACK_GRACE_SECONDS, self._force_stop)
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        """Move shutdown on: the publisher closes its link once its confirms are in, then writes back; then
        the loop stops, once no store work is running."""
        if self.loop.stopped:
            return
        if self.publisher.drain() and not self.loop.busy:
            self.loop.stop()

    def _force_stop(self) -> None:
        if self.loop.stopped:
            return
        log.error("shutdown could not write everything back in time; leases left will expire")
        self.clean_exit = False
        self.loop.stop()

    def _report(self) -> None:
        line = self._progress.report()
        if line is not None:
            log.info("%s", line)

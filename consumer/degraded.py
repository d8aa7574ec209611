"""Degraded mode: keep accepted work running while the broker is unreachable.

The choice: a consumer that has not been able to reach the broker for longer than
`DEGRADED_AFTER_SECONDS` (default 30; 0 turns degraded mode off) starts claiming jobs straight from the
jobs table with `claim_next`, the SQLite-only baseline's path, up to its concurrency, backing off between
empty polls (20 ms doubling to 1 s). The moment its connection is back it stops polling and takes work
from the broker again. Nothing else changes: the claim, the fence, the lease and the commit are the same,
so a job is still run by one worker at a time, and deliveries published for a job claimed this way are
absorbed as duplicates later. While the broker is reachable the consumer never reads the jobs table.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

from sqlalchemy import Connection, Engine

from outbox_bridge.consumer.link import DeliveryLink
from outbox_bridge.consumer.pipeline import Pipeline
from outbox_bridge.core import faults
from outbox_bridge.core.backoff import Backoff, Streak
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.limits import Limits
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.worker.polling import claim_next
from outbox_bridge.worker.share import TenantShare

log = logging.getLogger(__name__)

CHECK_INTERVAL = 0.2
IDLE_FIRST_PAUSE = 0.02
IDLE_MAX_PAUSE = 1.0
FULL_PAUSE = 0.02


class DegradedMode:
    """Claims from the table with `claim_next` while the broker has been unreachable for longer than
    `settings.degraded_after_seconds` (never when that is 0)."""

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        link: DeliveryLink,
        pipeline: Pipeline,
        *,
        concurrency: int,
        worker: str,
    ) -> None:
        self._engine = engine
        self._settings = settings
        self._link = link
        self._pipeline = pipeline
        self._concurrency = concurrency
        self._worker = worker
        self._share = TenantShare(settings.tenant_share, concurrency)
        self._after = settings.degraded_after_seconds
        self._idle = Streak(Backoff(IDLE_FIRST_PAUSE, IDLE_MAX_PAUSE))
        self.active = False
        self.claimed = 0
        self._claimed_before = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="degraded-mode", daemon=True)

    def start(self) -> DegradedMode:
        if self._after > 0:
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Claim nothing more; waits for a claim in progress."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        pause = CHECK_INTERVAL
        while not self._stop.wait(pause):
            self._switch(self._link.down_for() >= self._after)
            pause = self._step() if self.active else CHECK_INTERVAL

    def _switch(self, degraded: bool) -> None:
        if degraded and not self.active:
            self._claimed_before = self.claimed
            log.warning(
                "broker unreachable for %.1fs: degraded mode, claiming from the jobs table",
                self._link.down_for(),
            )
        elif self.active and not degraded:
            episode = self.claimed - self._claimed_before
            log.info("broker reachable again: leaving degraded mode after %d jobs from the table", episode)
        self.active = degraded

    def _step(self) -> float:
        """Claim one job if there is room; returns how long to wait before the next step."""
        if self._pipeline.in_flight() >= self._concurrency:
            return FULL_PAUSE
        try:
            claim = db.transact(self._engine, self._claim_next)
        except db.StoreUnavailable as exc:
            log.warning("degraded mode: store unavailable: %s", exc)
            claim = None
        if claim is None:
            return self._idle.failed()
        self._idle.reset()
        faults.hit("consumer.after_claim")
        self._pipeline.begin(claim, None)
        self.claimed += 1
        return 0.0

    def _claim_next(self, conn: Connection) -> Claim | None:
        """The next job, within `TENANT_MAX_RUNNING` and `TENANT_SHARE` (one claim at a time: never
        claiming ahead)."""
        share = self._share.held(
            conn, Counter(r.claim.tenant for r in self._pipeline.running()), bursting=False
        )
        cap, lease = self._settings.tenant_max_running, self._settings.lease_seconds
        return claim_next(conn, self._worker, lease, cap, share, Limits.of(self._settings))

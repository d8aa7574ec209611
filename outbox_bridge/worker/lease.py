"""Leases this process holds: a `LeaseKeeper` thread renews every held lease in one transaction and carries
cancel requests back to the running code; a lease it cannot renew is marked lost, so the code stops at its
next check and nothing it returns is written."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, fenced
from outbox_bridge.jobstore.errors import Fenced
from outbox_bridge.jobstore.records import Claim

log = logging.getLogger(__name__)


@dataclass
class LeasedJob:
    """A job this process is running under its lease, as the lease keeper sees it."""

    claim: Claim
    cancel_requested: bool = False
    lost: bool = False
    # Being given back, or given back, to the store by a stopping worker (`worker.release`): an attempt
    # fenced out meanwhile was released, not lost.
    handed_back: bool = False
    # When its lease was last taken or renewed (monotonic seconds).
    renewed_at: float = field(default_factory=time.monotonic)


class LeaseKeeper:
    """Every `interval` seconds, renews together the held leases taken or renewed at least `interval` ago
    (a job that finishes sooner is never renewed: its lease has most of its length left), carries cancel
    requests back, and marks the leases it lost. A lease goes at most two intervals, at most two thirds of
    its length, without renewal."""

    def __init__(self, engine: Engine, settings: Settings, interval: float | None = None) -> None:
        self._engine = engine
        self._lease = settings.lease_seconds
        self._interval = interval if interval is not None else min(1.0, settings.lease_seconds / 3)
        self._held: dict[str, LeasedJob] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def hold(self, claim: Claim) -> LeasedJob:
        held = LeasedJob(claim)
        with self._lock:
            self._held[claim.job_id] = held
        return held

    def drop(self, job_id: str) -> None:
        with self._lock:
            self._held.pop(job_id, None)

    def held(self) -> list[LeasedJob]:
        with self._lock:
            return list(self._held.values())

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            due = time.monotonic() - self._interval
            current = [h for h in self.held() if not h.lost and h.renewed_at <= due]
            if current:
                try:
                    db.transact(self._engine, self._renew_all, current)
                except db.StoreUnavailable as exc:
                    log.warning("lease renewal postponed: %s", exc)

    def _renew_all(self, conn: Connection, current: list[LeasedJob]) -> None:
        now, renewed_at = clock.now(), time.monotonic()
        for held in current:
            try:
                held.cancel_requested = fenced.renew_lease(
                    conn, held.claim.job_id, held.claim.epoch, now, self._lease
                )
            except Fenced:
                held.lost = True
            held.renewed_at = renewed_at

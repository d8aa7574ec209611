"""The baseline's own lease sweeper: there is no relay beside it, so each worker process settles expired
leases, the jobs of gone workers and passed deadlines itself (`jobstore.sweeper`), and applies the job
retention every `RETENTION_CHECK_SECONDS` as a relay does (`worker.retention`). Several processes may sweep
at once; every move is a guarded UPDATE, so a job is settled once however many sweepers see it, and every
delete is guarded the same way."""

from __future__ import annotations

import logging
import random
import threading
import time

from sqlalchemy import Engine

from outbox_bridge.baseline.pacing import jittered
from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, statistics, sweeper
from outbox_bridge.telemetry import instruments
from outbox_bridge.worker.commit import backoff_of
from outbox_bridge.worker.retention import OutputSweep, retain

log = logging.getLogger(__name__)


class SweepLoop:
    """A thread that runs `sweeper.sweep_expired` about every `settings.sweep_interval_seconds`, jittered."""

    def __init__(self, engine: Engine, settings: Settings, stopping: threading.Event) -> None:
        self._engine = engine
        self._settings = settings
        self._stopping = stopping
        self._rng = random.Random()
        self._thread = threading.Thread(target=self._loop, name="lease-sweeper", daemon=True)
        self._output_sweep = OutputSweep()
        self._retain_at = time.monotonic() + settings.retention_check_seconds

    def start(self) -> SweepLoop:
        self._thread.start()
        return self

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stopping.wait(jittered(self._settings.sweep_interval_seconds, self._rng)):
            self.sweep_once()
            if time.monotonic() >= self._retain_at:
                self._retain_at = time.monotonic() + self._settings.retention_check_seconds
                self.retain_once()

    def sweep_once(self) -> None:
        """The tables' upkeep (`jobstore.statistics.tend`), then one sweep; a busy or
        unreachable store postpones the sweep to the next round instead of failing."""
        statistics.tend(self._engine)
        backoff = backoff_of(self._settings)
        try:
            settled = db.transact(
                self._engine,
                sweeper.sweep_expired,
                clock.now(),
                backoff=backoff,
                heartbeat=self._settings.heartbeat_seconds,
            )
        except db.StoreUnavailable as exc:
            log.warning("lease sweep postponed: %s", exc)
            return
        instruments.jobs_moved(settled.moves)
        if settled:
            log.info(
                "swept expired jobs: %s", ", ".join(f"{n} {state}" for state, n in sorted(settled.items()))
            )

    def retain_once(self) -> None:
        """One bounded retention pass; a busy or unreachable store postpones it to the next one."""
        try:
            retained = retain(self._engine, self._settings, self._output_sweep)
        except db.StoreUnavailable as exc:
            log.warning("retention postponed: %s", exc)
            return
        for line in retained.lines():
            log.info("%s", line)

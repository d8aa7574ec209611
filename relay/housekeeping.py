"""The rescuer: the relay's scheduled store work, which needs no broker. Every `SWEEP_INTERVAL_SECONDS` it
settles jobs whose lease or deadline ran out or whose worker is gone (`jobstore.sweeper`), drops outbox rows
published longer ago than the retention, announces again queued jobs whose delivery was lost, and announces
the held jobs a flow limit has room for (`jobstore.limits.release_held`). Every relay runs it, the leader and
the standbys alike. The job retention (`relay.retention`) runs on a timer of its own, less often."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

from sqlalchemy import Engine

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, limits, outbox, statistics, sweeper
from outbox_bridge.jobstore.limits import Limits
from outbox_bridge.relay.loop import RelayLoop
from outbox_bridge.relay.services import PeriodicService
from outbox_bridge.telemetry import instruments
from outbox_bridge.worker.commit import backoff_of

log = logging.getLogger("relay")


@dataclass(frozen=True)
class Housekept:
    swept: Counter[str]
    pruned: int
    reannounced: int = 0
    released: int = 0

    def lines(self) -> list[str]:
        found = []
        if self.swept:
            found.append("swept overdue jobs: " + ", ".join(f"{n} -> {s}" for s, n in self.swept.items()))
        if self.pruned:
            found.append(f"pruned {self.pruned} published outbox rows")
        if self.reannounced:
            found.append(f"announced {self.reannounced} long-queued jobs again (their deliveries were lost)")
        if self.released:
            found.append(f"announced {self.released} held jobs their limit has room for")
        return found


def sweep_and_prune(engine: Engine, settings: Settings) -> Housekept:
    """One sweep, one prune, one re-announcement and one release of held jobs, each in its own transaction
    (each is retried on lock contention), then the tables' upkeep: a VACUUM where dead row versions piled
    up, fresh planner statistics where they went stale (`jobstore.statistics`)."""
    now = clock.now()
    swept = db.transact(
        engine, sweeper.sweep_expired, now, backoff=backoff_of(settings), heartbeat=settings.heartbeat_seconds
    )
    instruments.jobs_moved(swept.moves)
    pruned = db.transact(engine, outbox.prune_published, older_than=now - settings.outbox_retention_seconds)
    reannounced = db.transact(
        engine, sweeper.reannounce_stale, now, older_than=now - settings.reannounce_after_seconds
    )
    released = db.transact(engine, limits.release_held, Limits.of(settings), now)
    statistics.tend(engine)
    return Housekept(swept, pruned, reannounced, released)


class Rescuer(PeriodicService[Housekept]):
    """`sweep_and_prune` every `sweep_interval_seconds`; what it found is logged."""

    name = "housekeeping"

    def __init__(self, settings: Settings, engine: Engine, loop: RelayLoop) -> None:
        super().__init__(loop, settings.sweep_interval_seconds)
        self._settings = settings
        self._engine = engine

    def work(self) -> Housekept:
        return sweep_and_prune(self._engine, self._settings)

    def done(self, result: Housekept) -> None:
        for line in result.lines():
            log.info("%s", line)

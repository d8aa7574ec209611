"""The relay's scheduled store work, which needs no broker: settle jobs whose lease or deadline ran out,
drop outbox rows published longer ago than the retention, and announce again queued jobs whose delivery
was lost. The job retention (`worker.retention`) runs on a timer of its own, less often."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sqlalchemy import Engine

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, outbox, statistics, sweeper
from outbox_bridge.worker.commit import backoff_of


@dataclass(frozen=True)
class Housekept:
    swept: Counter[str]
    pruned: int
    reannounced: int = 0

    def lines(self) -> list[str]:
        found = []
        if self.swept:
            found.append("swept overdue jobs: " + ", ".join(f"{n} -> {s}" for s, n in self.swept.items()))
        if self.pruned:
            found.append(f"pruned {self.pruned} published outbox rows")
        if self.reannounced:
            found.append(f"announced {self.reannounced} long-queued jobs again (their deliveries were lost)")
        return found


def sweep_and_prune(engine: Engine, settings: Settings) -> Housekept:
    """One sweep, one prune and one re-announcement, each in its own transaction (each is retried on lock
    contention), then fresh planner statistics where they went stale (`jobstore.statistics`)."""
    now = clock.now()
    swept = db.transact(engine, sweeper.sweep_expired, now, backoff=backoff_of(settings))
    pruned = db.transact(engine, outbox.prune_published, older_than=now - settings.outbox_retention_seconds)
    reannounced = db.transact(
        engine, sweeper.reannounce_stale, now, older_than=now - settings.reannounce_after_seconds
    )
    statistics.refresh(engine)
    return Housekept(swept, pruned, reannounced)

"""The relay's scheduled store work, which needs no broker: settle jobs whose lease or deadline ran out,
drop outbox rows published longer ago than the retention, and announce again queued jobs whose delivery
was lost; and, less often, apply the job retention (`relay.retention`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sqlalchemy import Engine

from core import clock
from core.settings import Settings
from jobstore import db, outbox, sweeper
from relay.retention import OutputSweep, Pruned, Swept, prune_finished
from worker.commit import backoff_of


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
    contention)."""
    now = clock.now()
    swept = db.transact(engine, sweeper.sweep_expired, now, backoff=backoff_of(settings))
    pruned = db.transact(engine, outbox.prune_published, older_than=now - settings.outbox_retention_seconds)
    reannounced = db.transact(
        engine, sweeper.reannounce_stale, now, older_than=now - settings.reannounce_after_seconds
    )
    return Housekept(swept, pruned, reannounced)


# Bounded work per retention pass: at most this many batches of jobs deleted (of `retention.BATCH`), and
# this many job directories looked through (the next pass goes on from there).
RETENTION_BATCHES = 10
SWEEP_DIRECTORIES = 2_000


@dataclass(frozen=True)
class Retained:
    pruned: Pruned
    swept: Swept

    def lines(self) -> list[str]:
        found = []
        if self.pruned.jobs:
            found.append(
                f"retention: deleted {self.pruned.jobs} finished jobs and {self.pruned.files} of their files"
            )
        if self.swept.files or self.swept.directories:
            found.append(
                f"retention: removed {self.swept.files} files of attempts that did not become a result or of "
                f"jobs that no longer exist, and {self.swept.directories} directories of such jobs"
            )
        return found


def retain(engine: Engine, settings: Settings, sweep: OutputSweep) -> Retained:
    """One bounded retention pass: jobs finished longer than `job_retention_seconds` ago are deleted (none
    when it is 0), then `sweep` goes on through the results directory."""
    now = clock.now()
    pruned = Pruned()
    if settings.job_retention_seconds > 0:
        cutoff = now - settings.job_retention_seconds
        pruned = prune_finished(engine, settings, cutoff, batches=RETENTION_BATCHES)
    return Retained(pruned, sweep.run(engine, settings, now, limit=SWEEP_DIRECTORIES))

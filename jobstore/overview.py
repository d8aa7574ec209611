"""The operator's figures, shared by `outbox-bridge status` and the dashboard."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import heartbeats, outbox, queries
from outbox_bridge.jobstore.alerts import Alert, alerts
from outbox_bridge.jobstore.heartbeats import Process
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.states import State
from outbox_bridge.telemetry.exposition import StoreFigures


@dataclass(frozen=True)
class Overview:
    counts: dict[str, int]
    backlog: outbox.Backlog
    throughput: list[tuple[float, int]]  # (bucket start, jobs finished) per minute
    recent: list[Job]
    dead: list[Job]
    unknown: list[Job]
    due: queries.DueQueue
    processes: list[Process]  # the live ones
    alerts: list[Alert]

    @property
    def alive(self) -> dict[str, int]:
        return heartbeats.by_role(self.processes)


@dataclass(frozen=True)
class Liveness:
    """How the overview judges who is alive and what is late: a process is alive when seen within
    `alive_within` seconds; a due job waiting longer than `queued_age_limit` is an alert (0: never)."""

    alive_within: float
    queued_age_limit: float

    @classmethod
    def of(cls, settings: Settings) -> Liveness:
        return cls(settings.alive_within_seconds, settings.queued_age_warning_seconds)


def overview(
    conn: Connection, now: float, liveness: Liveness, *, minutes: int = 10, recent: int = 20
) -> Overview:
    start = now - 60 * minutes
    finished = dict(queries.finished_since(conn, start, 60.0))
    throughput = [(start + 60 * i, finished.get(start + 60 * i, 0)) for i in range(minutes)]
    backlog = outbox.backlog(conn, now)
    due = queries.due_queue(conn, now)
    alive = heartbeats.alive(conn, now, liveness.alive_within)
    found = alerts(
        due=due.jobs,
        oldest_due_age=due.oldest_age_seconds,
        outbox_pending=backlog.pending,
        alive=heartbeats.by_role(alive),
        queued_age_limit=liveness.queued_age_limit,
    )
    return Overview(
        counts=queries.counts_by_state(conn),
        backlog=backlog,
        throughput=throughput,
        recent=queries.list_jobs(conn, tenant=None, limit=recent).items,
        dead=queries.list_jobs(conn, tenant=None, state=State.DEAD, limit=50).items,
        unknown=queries.list_jobs(conn, tenant=None, state=State.UNKNOWN, limit=50).items,
        due=due,
        processes=alive,
        alerts=found,
    )


def store_figures(conn: Connection, now: float, alive_within: float) -> StoreFigures:
    """What a metrics scrape reports about the store: jobs by state, the oldest due queued job, the outbox
    backlog, and the processes seen within `alive_within` seconds, by role."""
    backlog = outbox.backlog(conn, now)
    return StoreFigures(
        jobs_by_state=queries.counts_by_state(conn),
        queued_oldest_age_seconds=queries.due_queue(conn, now).oldest_age_seconds,
        outbox_pending=backlog.pending,
        outbox_oldest_age_seconds=backlog.oldest_age_seconds,
        alive=heartbeats.by_role(heartbeats.alive(conn, now, alive_within)),
    )

"""The operator's figures, shared by `outbox-bridge status` and the dashboard."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Connection

from outbox_bridge.core.settings import ALIVE_BEATS, Settings
from outbox_bridge.jobstore import (
    conditions,
    heartbeats,
    limits,
    outbox,
    pausing,
    queries,
    schedules,
    workflows,
)
from outbox_bridge.jobstore.alerts import Alert, alerts
from outbox_bridge.jobstore.conditions import LeaseOwners, ProcessStatus
from outbox_bridge.jobstore.heartbeats import Process
from outbox_bridge.jobstore.limits import HeldCount
from outbox_bridge.jobstore.pausing import PausedKind
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.schedules import PeriodicSchedule
from outbox_bridge.jobstore.states import State
from outbox_bridge.telemetry.exposition import QueueFigures, ScheduleFigures, StoreFigures

# The overview lists at most this many running jobs whose worker is lost (their count is exact).
WORKER_LOST_LISTED = 100


@dataclass(frozen=True)
class Overview:
    counts: dict[str, int]
    backlog: outbox.Backlog
    throughput: list[tuple[float, int]]  # (bucket start, jobs finished) per minute
    recent: list[Job]
    dead: list[Job]
    unknown: list[Job]
    due: queries.DueQueue
    statuses: list[ProcessStatus]  # every process whose row is still there: alive, late or lost
    worker_lost: list[Job]  # running jobs whose worker is lost, the soonest lease expiry first
    alerts: list[Alert]
    at: float  # when it was read
    paused_kinds: list[PausedKind] = field(default_factory=list)
    schedules: list[PeriodicSchedule] = field(default_factory=list)
    held: list[HeldCount] = field(default_factory=list)  # queued jobs a flow limit holds back
    queues: list[QueueFigures] = field(default_factory=list)  # by name, `default` always among them

    @property
    def processes(self) -> list[Process]:
        """The live processes (alive or late)."""
        return conditions.live(self.statuses)

    @property
    def lost(self) -> list[ProcessStatus]:
        return [s for s in self.statuses if not s.live]

    @property
    def alive(self) -> dict[str, int]:
        return heartbeats.by_role(self.processes)


@dataclass(frozen=True)
class Liveness:
    """How the overview judges who is alive and what is late: a process is alive when seen within
    `alive_within` seconds (`ALIVE_BEATS` heartbeats); a due job waiting longer than `queued_age_limit` is
    an alert (0: never)."""

    alive_within: float
    queued_age_limit: float

    @classmethod
    def of(cls, settings: Settings) -> Liveness:
        return cls(settings.alive_within_seconds, settings.queued_age_warning_seconds)

    @property
    def heartbeat(self) -> float:
        """How often each process beats."""
        return self.alive_within / ALIVE_BEATS


def overview(
    conn: Connection,
    now: float,
    liveness: Liveness,
    *,
    minutes: int = 10,
    recent: int = 20,
    here: str | None = None,
) -> Overview:
    """The figures at `now`, as a reader on host `here` (default: this one) judges the processes."""
    start = now - 60 * minutes
    finished = dict(queries.finished_since(conn, start, 60.0))
    throughput = [(start + 60 * i, finished.get(start + 60 * i, 0)) for i in range(minutes)]
    backlog = outbox.backlog(conn, now)
    due = queries.due_queue(conn, now)
    held = queries.leases_by_owner(conn)
    found = conditions.statuses(conn, now, liveness.heartbeat, here=here, held=held)
    owners = LeaseOwners.of(found)
    lost_owners = [owner for owner in held if owners.worker_lost(owner)]
    warned = alerts(
        due=due.jobs,
        oldest_due_age=due.oldest_age_seconds,
        outbox_pending=backlog.pending,
        alive=heartbeats.by_role(conditions.live(found)),
        queued_age_limit=liveness.queued_age_limit,
        worker_lost=sum(held[owner].jobs for owner in lost_owners),
    )
    return Overview(
        counts=queries.counts_by_state(conn),
        backlog=backlog,
        throughput=throughput,
        recent=queries.list_jobs(conn, tenant=None, limit=recent).items,
        dead=queries.list_jobs(conn, tenant=None, state=State.DEAD, limit=50).items,
        unknown=queries.list_jobs(conn, tenant=None, state=State.UNKNOWN, limit=50).items,
        due=due,
        statuses=found,
        worker_lost=queries.running_jobs_of(conn, lost_owners, limit=WORKER_LOST_LISTED),
        alerts=warned,
        at=now,
        paused_kinds=pausing.paused(conn),
        schedules=schedules.list_all(conn),
        held=limits.held_counts(conn),
        queues=queries.queue_figures(conn, now),
    )


def store_figures(conn: Connection, now: float, alive_within: float) -> StoreFigures:
    """What a metrics scrape reports about the store: jobs by state, the oldest due queued job, the outbox
    backlog, the live processes by role (seen within `alive_within` seconds and not found gone on this
    host, as `conditions` judges them), the schedules that are not paused, the paused kinds, the jobs flow
    limits hold back, each queue's waiting, running and oldest waiting job, and the batches by state."""
    backlog = outbox.backlog(conn, now)
    found = conditions.statuses(conn, now, Liveness(alive_within, queued_age_limit=0.0).heartbeat)
    return StoreFigures(
        jobs_by_state=queries.counts_by_state(conn),
        queued_oldest_age_seconds=queries.due_queue(conn, now).oldest_age_seconds,
        outbox_pending=backlog.pending,
        outbox_oldest_age_seconds=backlog.oldest_age_seconds,
        alive=heartbeats.by_role(conditions.live(found)),
        schedules=[
            ScheduleFigures(s.tenant, s.name, s.next_slot_at, s.due_age(now) or 0.0)
            for s in schedules.list_all(conn)
            if not s.paused
        ],
        paused_kinds=pausing.paused_since(conn),
        held={(h.kind, h.held_by): h.queued for h in limits.held_counts(conn)},
        queues=queries.queue_figures(conn, now),
        batches=workflows.batches_by_state(conn),
    )

"""The operator's figures, shared by `outbox-bridge status` and the dashboard."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection

from jobstore import outbox, queries
from jobstore.records import Job
from jobstore.states import State


@dataclass(frozen=True)
class Overview:
    counts: dict[str, int]
    backlog: outbox.Backlog
    throughput: list[tuple[float, int]]  # (bucket start, jobs finished) per minute
    recent: list[Job]
    dead: list[Job]
    unknown: list[Job]


def overview(conn: Connection, now: float, *, minutes: int = 10, recent: int = 20) -> Overview:
    start = now - 60 * minutes
    finished = dict(queries.finished_since(conn, start, 60.0))
    throughput = [(start + 60 * i, finished.get(start + 60 * i, 0)) for i in range(minutes)]
    return Overview(
        counts=queries.counts_by_state(conn),
        backlog=outbox.backlog(conn, now),
        throughput=throughput,
        recent=queries.list_jobs(conn, tenant=None, limit=recent).items,
        dead=queries.list_jobs(conn, tenant=None, state=State.DEAD, limit=50).items,
        unknown=queries.list_jobs(conn, tenant=None, state=State.UNKNOWN, limit=50).items,
    )

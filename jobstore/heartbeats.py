"""Heartbeats: which relays, consumers and workers are alive.

Every long-running process owns one row of `processes`, under an id it picks afresh at each start, and
writes it every few seconds (`beat`); that is the only write liveness costs, never one per job. A process
is alive while its row was seen within the reader's window (`alive`). The same beat deletes the rows of
processes gone quiet for long (killed, not stopped), so the table holds about as many rows as there are
processes; a clean stop deletes its own row (`remove`).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, bindparam, delete, insert, select, update

from jobstore.schema import processes

ROLES = ("api", "relay", "consumer", "worker")
# The roles whose processes beat today (the api does not yet): always reported, as 0 when none is alive.
BEATING = ("relay", "consumer", "worker")

_UPDATE = (
    update(processes)
    .where(processes.c.id == bindparam("b_id"))
    .values(last_seen_at=bindparam("b_now"), detail=bindparam("b_detail"))
)
_INSERT = insert(processes)
_FORGET = delete(processes).where(processes.c.last_seen_at < bindparam("b_before"))
_REMOVE = delete(processes).where(processes.c.id == bindparam("b_id"))


@dataclass(frozen=True)
class Process:
    """A process as its heartbeat row says: who, where, since when, last seen when, and what it reported."""

    id: str
    role: str
    host: str
    pid: int
    version: str
    started_at: float
    last_seen_at: float
    detail: dict[str, Any] = field(default_factory=dict)


def beat(conn: Connection, me: Process, now: float, *, forget_before: float) -> None:
    """Record that `me` is alive at `now` with its latest `detail` (its row is created at its first beat),
    and delete every row not seen since `forget_before`."""
    detail = json.dumps(me.detail, sort_keys=True, separators=(",", ":"))
    if conn.execute(_UPDATE, {"b_id": me.id, "b_now": now, "b_detail": detail}).rowcount == 0:
        conn.execute(
            _INSERT,
            {
                "id": me.id,
                "role": me.role,
                "host": me.host,
                "pid": me.pid,
                "version": me.version,
                "started_at": me.started_at,
                "last_seen_at": now,
                "detail": detail,
            },
        )
    conn.execute(_FORGET, {"b_before": forget_before})


def remove(conn: Connection, process_id: str) -> bool:
    """Delete the row of a process that stopped cleanly; False when it was already gone."""
    return conn.execute(_REMOVE, {"b_id": process_id}).rowcount > 0


def alive(conn: Connection, now: float, within: float) -> list[Process]:
    """The processes seen within `within` seconds of `now`, by role, host, then pid."""
    rows = conn.execute(
        select(processes)
        .where(processes.c.last_seen_at >= now - within)
        .order_by(processes.c.role, processes.c.host, processes.c.pid, processes.c.started_at)
    ).mappings()
    return [
        Process(
            id=row["id"],
            role=row["role"],
            host=row["host"],
            pid=row["pid"],
            version=row["version"],
            started_at=row["started_at"],
            last_seen_at=row["last_seen_at"],
            detail=json.loads(row["detail"]),
        )
        for row in rows
    ]


def by_role(alive_processes: list[Process]) -> dict[str, int]:
    """How many of `alive_processes` there are of each role: every role that beats (0 when none), and any
    other role a process reported."""
    counts = Counter(p.role for p in alive_processes)
    return {role: counts.get(role, 0) for role in BEATING} | dict(sorted(counts.items()))

"""Reads: listings, results, counts. No writes here. Each is a named statement of the store's driver
(`reads.sql`); a job is read with every column of the jobs table, in the table's order (`job_of`)."""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from outbox_bridge.core.queue_names import DEFAULT_QUEUE
from outbox_bridge.jobstore import db, drivers
from outbox_bridge.jobstore.filters import JobFilter
from outbox_bridge.jobstore.records import Attempt, Job, OperatorAction
from outbox_bridge.jobstore.schema import JOB_COLUMNS, attempts, operator_actions
from outbox_bridge.jobstore.states import State
from outbox_bridge.telemetry.exposition import QueueFigures


class BadCursor(ValueError):
    pass


# A job id as the store makes them (a UUID), and no more: nothing else can have come from `encode_cursor`,
# and nothing else can start a job id.
_CURSOR_ID = re.compile(r"[0-9a-f-]{1,36}", re.ASCII)


def encode_cursor(job: Job) -> str:
    return encode_position(job.created_at, job.id)


def encode_position(created_at: float, job_id: str) -> str:
    return base64.urlsafe_b64encode(f"{created_at!r}|{job_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """The position (created_at, id) in a cursor that `encode_cursor` made. `BadCursor` for anything else:
    text it cannot have written (another encoding of the same bytes, padding, other characters), a time that
    is not a finite number in its canonical form (`nan`, `inf`, `1e999`, `1.7e9`), an id not a job id's."""
    created, job_id = _position(cursor)
    canonical = math.isfinite(created) and _CURSOR_ID.fullmatch(job_id) is not None
    if not canonical or encode_position(created, job_id) != cursor:
        raise BadCursor("not a cursor")
    return created, job_id


def _position(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, _, job_id = raw.partition("|")
        return float(created), job_id
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise BadCursor("not a cursor") from exc


@dataclass(frozen=True)
class Page:
    items: list[Job]
    next_cursor: str | None


_ATTEMPT_COLUMNS = tuple(column.name for column in attempts.c)
_ACTION_COLUMNS = tuple(column.name for column in operator_actions.c)


def job_of(row: tuple[Any, ...]) -> Job:
    """The job a row of all the jobs table's columns, in the table's order, holds."""
    return Job.from_row(dict(zip(JOB_COLUMNS, row, strict=True)))


def attempt_of(row: tuple[Any, ...]) -> Attempt:
    """The attempt a row of all the attempts table's columns, in the table's order, holds."""
    return Attempt.from_row(dict(zip(_ATTEMPT_COLUMNS, row, strict=True)))


def get_job(conn: Connection, job_id: str, *, tenant: str | None = None) -> Job | None:
    """The job, or None when it does not exist or belongs to another tenant."""
    rows = db.execute(conn, "job_get", {"id": job_id, "tenant": tenant})
    return job_of(rows[0]) if rows else None


@dataclass(frozen=True)
class IdMatch:
    """The jobs whose id starts with a prefix: how many, and the job itself when exactly one does."""

    count: int
    job: Job | None


def match_id_prefix(conn: Connection, prefix: str) -> IdMatch:
    """The jobs of every tenant (an operator's lookup) whose id starts with `prefix`, in any letter case.
    Text that no job id can start with matches nothing."""
    matching = JobFilter(id_prefix=prefix)
    count = count_jobs(conn, matching)
    if count != 1:
        return IdMatch(count, None)
    return IdMatch(1, find_jobs(conn, matching, limit=1).items[0])


def list_jobs(
    conn: Connection,
    *,
    tenant: str | None,
    state: State | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Page:
    """A tenant's jobs (all tenants when `tenant` is None), newest first, `limit` at a time."""
    states = frozenset() if state is None else frozenset({state})
    return find_jobs(conn, JobFilter(states=states, tenant=tenant), limit=limit, cursor=cursor)


def find_jobs(conn: Connection, matching: JobFilter, *, limit: int = 50, cursor: str | None = None) -> Page:
    """The jobs `matching` names, newest first, `limit` at a time after `cursor`."""
    created, job_id = decode_cursor(cursor) if cursor else (None, None)
    if matching.matches_nothing:
        return Page([], None)
    params = matching.params(conn) | {"after_created_at": created, "after_id": job_id, "limit": limit + 1}
    found = [job_of(row) for row in db.execute(conn, f"jobs_find_{matching.shape}", params)]
    items = found[:limit]
    return Page(items, encode_cursor(items[-1]) if len(found) > limit else None)


def count_jobs(conn: Connection, matching: JobFilter) -> int:
    """How many jobs `matching` names."""
    if matching.matches_nothing:
        return 0
    [(count,)] = db.execute(conn, f"jobs_count_{matching.shape}", matching.params(conn))
    return int(count)


def attempts_of(conn: Connection, job_id: str) -> list[Attempt]:
    return [attempt_of(row) for row in db.execute(conn, "job_attempts", {"job_id": job_id})]


def actions_of(conn: Connection, job_id: str) -> list[OperatorAction]:
    """What operators did to the job, oldest first."""
    rows = db.execute(conn, "job_operator_actions", {"job_id": job_id})
    return [OperatorAction.from_row(dict(zip(_ACTION_COLUMNS, row, strict=True))) for row in rows]


def committed_result(conn: Connection, job_id: str, *, tenant: str | None = None) -> Attempt | None:
    """The attempt the job's result pointer names, only once the job has succeeded."""
    rows = db.execute(conn, "job_committed_result", {"job_id": job_id, "tenant": tenant})
    return attempt_of(rows[0]) if rows else None


def counts_by_state(conn: Connection, *, tenant: str | None = None) -> dict[str, int]:
    """How many jobs are in each state (of `tenant`'s, when given): the queued and the running jobs counted
    in their own indexes, the finished ones in theirs, never a read of the whole table."""
    counts = {s.value: 0 for s in State}
    rows = db.execute(conn, "job_counts_by_state", {"tenant": tenant})
    counts.update({str(state): int(n) for state, n in rows})
    return counts


def finished_since(conn: Connection, since: float, bucket_seconds: float) -> Sequence[tuple[float, int]]:
    """Jobs finished per time bucket since `since` (for throughput charts)."""
    rows = db.execute(conn, "jobs_finished_per_bucket", {"since": since, "bucket_seconds": bucket_seconds})
    return [(since + float(b) * bucket_seconds, int(n)) for b, n in rows]


@dataclass(frozen=True)
class DueQueue:
    """Queued jobs that are due (not delayed into the future), and how long the oldest has been due."""

    jobs: int
    oldest_age_seconds: float


def due_queue(conn: Connection, now: float) -> DueQueue:
    """The queued jobs due at `now` (a delayed job counts from its `run_at`, a retry from the end of its
    backoff), but for those of a paused kind, which wait on purpose (`pausing`); one range of the (state,
    available_at) index."""
    [(count, oldest)] = db.execute(conn, "jobs_due_queue", {"now": now})
    age = 0.0 if oldest is None else max(0.0, now - float(oldest))
    return DueQueue(int(count), age)


def queue_figures(conn: Connection, now: float) -> list[QueueFigures]:
    """Each named queue with a due queued job or a running one, and `default` always, by name: its due jobs
    as `due_queue` counts them, its running jobs, and how long its oldest due job has waited. One read of
    the queued jobs' due range and of the running jobs, each on its state's own index."""
    found = {
        str(queue): QueueFigures(
            str(queue), int(waiting), int(running), 0.0 if oldest is None else max(0.0, now - float(oldest))
        )
        for queue, waiting, oldest, running in db.execute(conn, "jobs_by_queue", {"now": now})
    }
    found.setdefault(DEFAULT_QUEUE, QueueFigures(DEFAULT_QUEUE, 0, 0, 0.0))
    return sorted(found.values(), key=lambda queue: queue.name)


@dataclass(frozen=True)
class Leases:
    """The running jobs one lease owner holds: how many, and when the soonest of their leases expires."""

    jobs: int = 0
    soonest_expiry: float | None = None


def leases_by_owner(conn: Connection) -> dict[str, Leases]:
    """The leases of the running jobs by owner (the worker name a claim wrote): one GROUP BY over one range
    of the (state, lease_expires_at) index. What a process holds, counted from the store."""
    return {
        str(owner): Leases(int(count), None if soonest is None else float(soonest))
        for owner, count, soonest in db.execute(conn, "leases_by_owner")
    }


def running_jobs_of(conn: Connection, owners: Sequence[str], *, limit: int) -> list[Job]:
    """Up to `limit` running jobs whose lease any of `owners` holds, the soonest lease expiry first."""
    if not owners:
        return []
    params = {"owners": drivers.of(conn).array(sorted(owners)), "limit": limit}
    return [job_of(row) for row in db.execute(conn, "jobs_running_of", params)]


def last_workers(conn: Connection, job_ids: Sequence[str]) -> dict[str, str]:
    """The worker of each job's latest attempt (the one its epoch names), by job id; a job never claimed
    has none."""
    if not job_ids:
        return {}
    rows = db.execute(conn, "jobs_last_workers", {"ids": drivers.of(conn).array(sorted(job_ids))})
    return {str(job_id): str(worker) for job_id, worker in rows}

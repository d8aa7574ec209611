"""Reads: listings, results, counts. No writes here."""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, String, and_, bindparam, func, literal_column, or_, select, union_all

from outbox_bridge.jobstore import pausing
from outbox_bridge.jobstore.filters import JobFilter
from outbox_bridge.jobstore.records import Attempt, Job, OperatorAction
from outbox_bridge.jobstore.schema import FINISHED, attempts, jobs, operator_actions, state_is
from outbox_bridge.jobstore.states import State


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


_BY_ID = select(jobs).where(jobs.c.id == bindparam("b_id"))
_BY_ID_AND_TENANT = _BY_ID.where(jobs.c.tenant == bindparam("b_tenant"))


def get_job(conn: Connection, job_id: str, *, tenant: str | None = None) -> Job | None:
    """The job, or None when it does not exist or belongs to another tenant."""
    if tenant is None:
        row = conn.execute(_BY_ID, {"b_id": job_id}).mappings().first()
    else:
        row = conn.execute(_BY_ID_AND_TENANT, {"b_id": job_id, "b_tenant": tenant}).mappings().first()
    return Job.from_row(row) if row else None


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
    query = select(jobs).order_by(jobs.c.created_at.desc(), jobs.c.id.desc()).limit(limit + 1)
    query = query.where(*matching.clauses())
    if cursor:
        created, job_id = decode_cursor(cursor)
        query = query.where(
            or_(jobs.c.created_at < created, and_(jobs.c.created_at == created, jobs.c.id < job_id))
        )
    found = [Job.from_row(r) for r in conn.execute(query).mappings()]
    items = found[:limit]
    return Page(items, encode_cursor(items[-1]) if len(found) > limit else None)


def count_jobs(conn: Connection, matching: JobFilter) -> int:
    """How many jobs `matching` names."""
    query = select(func.count()).select_from(jobs).where(*matching.clauses())
    return int(conn.execute(query).scalar_one())


def attempts_of(conn: Connection, job_id: str) -> list[Attempt]:
    rows = conn.execute(select(attempts).where(attempts.c.job_id == job_id).order_by(attempts.c.epoch))
    return [Attempt.from_row(r) for r in rows.mappings()]


def actions_of(conn: Connection, job_id: str) -> list[OperatorAction]:
    """What operators did to the job, oldest first."""
    query = (
        select(operator_actions)
        .where(operator_actions.c.job_id == job_id)
        .order_by(operator_actions.c.at, operator_actions.c.id)
    )
    return [OperatorAction.from_row(r) for r in conn.execute(query).mappings()]


def committed_result(conn: Connection, job_id: str, *, tenant: str | None = None) -> Attempt | None:
    """The attempt the job's result pointer names, only once the job has succeeded."""
    query = (
        select(attempts)
        .join(jobs, jobs.c.result_attempt_id == attempts.c.id)
        .where(jobs.c.id == job_id, state_is(State.SUCCEEDED))
    )
    if tenant is not None:
        query = query.where(jobs.c.tenant == tenant)
    row = conn.execute(query).mappings().first()
    return Attempt.from_row(row) if row else None


def counts_by_state(conn: Connection, *, tenant: str | None = None) -> dict[str, int]:
    """How many jobs are in each state (of `tenant`'s, when given): the queued and the running jobs counted
    in their own indexes, the finished ones in theirs, never a read of the whole table."""
    of_tenant = [] if tenant is None else [jobs.c.tenant == tenant]
    parts = [
        select(literal_column(f"'{state.value}'", String), func.count()).where(state_is(state), *of_tenant)
        for state in (State.QUEUED, State.RUNNING)
    ]
    finished = select(jobs.c.state, func.count()).where(FINISHED, *of_tenant).group_by(jobs.c.state)
    counts = {s.value: 0 for s in State}
    counts.update({str(state): int(n) for state, n in conn.execute(union_all(*parts, finished)).all()})
    return counts


def finished_since(conn: Connection, since: float, bucket_seconds: float) -> Sequence[tuple[float, int]]:
    """Jobs finished per time bucket since `since` (for throughput charts)."""
    bucket = func.floor((jobs.c.finished_at - since) / bucket_seconds)
    rows = conn.execute(
        select(bucket, func.count()).where(jobs.c.finished_at >= since).group_by(bucket).order_by(bucket)
    ).all()
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
    count, oldest = conn.execute(
        select(func.count(), func.min(jobs.c.available_at)).where(
            state_is(State.QUEUED), jobs.c.available_at <= now, pausing.NOT_PAUSED
        )
    ).one()
    age = 0.0 if oldest is None else max(0.0, now - float(oldest))
    return DueQueue(int(count), age)


@dataclass(frozen=True)
class Leases:
    """The running jobs one lease owner holds: how many, and when the soonest of their leases expires."""

    jobs: int = 0
    soonest_expiry: float | None = None


def leases_by_owner(conn: Connection) -> dict[str, Leases]:
    """The leases of the running jobs by owner (the worker name a claim wrote): one GROUP BY over one range
    of the (state, lease_expires_at) index. What a process holds, counted from the store."""
    query = (
        select(jobs.c.lease_owner, func.count(), func.min(jobs.c.lease_expires_at))
        .where(state_is(State.RUNNING), jobs.c.lease_owner.is_not(None))
        .group_by(jobs.c.lease_owner)
    )
    return {
        str(owner): Leases(int(count), None if soonest is None else float(soonest))
        for owner, count, soonest in conn.execute(query).all()
    }


def running_jobs_of(conn: Connection, owners: Sequence[str], *, limit: int) -> list[Job]:
    """Up to `limit` running jobs whose lease any of `owners` holds, the soonest lease expiry first."""
    if not owners:
        return []
    query = (
        select(jobs)
        .where(state_is(State.RUNNING), jobs.c.lease_owner.in_(sorted(owners)))
        .order_by(jobs.c.lease_expires_at, jobs.c.id)
        .limit(limit)
    )
    return [Job.from_row(r) for r in conn.execute(query).mappings()]


def last_workers(conn: Connection, job_ids: Sequence[str]) -> dict[str, str]:
    """The worker of each job's latest attempt (the one its epoch names), by job id; a job never claimed
    has none."""
    if not job_ids:
        return {}
    query = (
        select(attempts.c.job_id, attempts.c.worker)
        .join(jobs, and_(jobs.c.id == attempts.c.job_id, jobs.c.epoch == attempts.c.epoch))
        .where(jobs.c.id.in_(sorted(job_ids)))
    )
    return {str(job_id): str(worker) for job_id, worker in conn.execute(query).all()}

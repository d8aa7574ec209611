"""The outbox: rows that say "job X needs attention", written in the transaction that needs the attention
and published by the relay that holds the relay role (`jobstore.relayrole`: its reads of the due rows, in
`due_order`, and its fenced marks)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Float,
    Select,
    and_,
    bindparam,
    delete,
    func,
    insert,
    select,
)

from outbox_bridge.jobstore import db, events, host_notify, tenantcap
from outbox_bridge.jobstore.schema import jobs, outbox
from outbox_bridge.telemetry.logs import job_event
from outbox_bridge.telemetry.tracing import trace_id_of

# Built once with bound parameters: building a statement costs far more than running it.
# A row for a job written earlier takes the job's tenant and priority from its row (the relay leases by them).
_OF_JOB: BindParameter[str] = bindparam("job_id")
_INSERT_FOR_JOB = insert(outbox).values(
    job_id=_OF_JOB,
    tenant=select(jobs.c.tenant).where(jobs.c.id == _OF_JOB).scalar_subquery(),
    priority=select(jobs.c.priority).where(jobs.c.id == _OF_JOB).scalar_subquery(),
)


def _drop_pending(of_jobs: ColumnElement[bool]) -> Any:
    """The unpublished rows of the jobs `of_jobs` picks, deleted."""
    return delete(outbox).where(of_jobs, outbox.c.published_at.is_(None))


# Run through `db` (`db.run`, `db.direct_in`), so that a driver may adapt them (`Driver.adapted`).
DROP_PENDING = _drop_pending(outbox.c.job_id == bindparam("b_job"))
DROP_PENDING_MANY = _drop_pending(outbox.c.job_id.in_(bindparam("b_jobs", expanding=True)))
_NOW = bindparam("b_now", type_=Float)


def add(conn: Connection, job_id: str, *, available_at: float, now: float) -> None:
    """Queue a delivery of `job_id` that comes due at `available_at`; the relays are notified when the
    caller's transaction commits (`jobstore.host_notify`)."""
    conn.execute(
        _INSERT_FOR_JOB,
        {"job_id": job_id, "created_at": now, "available_at": available_at, "publish_attempts": 0},
    )
    host_notify.note_outbox_row(conn, available_at)


def add_many(conn: Connection, deliveries: Sequence[tuple[str, float, float]]) -> None:
    """`add` for each (job id, available at, now), in one multi-row insert."""
    if not deliveries:
        return
    conn.execute(
        _INSERT_FOR_JOB,
        [
            {"job_id": job_id, "created_at": now, "available_at": at, "publish_attempts": 0}
            for job_id, at, now in deliveries
        ],
    )
    host_notify.note_outbox_row(conn, min(at for _, at, _ in deliveries))


def drop_pending(conn: Connection, job_id: str) -> None:
    """Forget unpublished deliveries of a job that no longer needs one (claimed directly, or cancelled)."""
    db.run(conn, DROP_PENDING, {"b_job": job_id})


def drop_pending_many(conn: Connection, job_ids: Sequence[str]) -> None:
    """`drop_pending` for each of `job_ids`, in one statement."""
    if job_ids:
        db.direct_in(conn, DROP_PENDING_MANY, {}, "b_jobs", job_ids)


@dataclass(frozen=True)
class Lease:
    token: str
    rows: tuple[tuple[int, str], ...]  # (outbox id, job id)
    # The trace context stored with each leased job that has one (`jobs.traceparent`), by job id.
    traceparents: Mapping[str, str] = field(default_factory=dict)
    # (priority, tenant) by outbox id: what a consumer orders the deliveries it holds by.
    orders: Mapping[int, tuple[int, str]] = field(default_factory=dict)


_DUE = and_(outbox.c.published_at.is_(None), outbox.c.available_at <= _NOW)
# Two orders. While no more rows are due than a read takes, the oldest walk of the (published_at, priority,
# id) index finds them all, and their order does not matter. When more are due, the read takes them by
# priority (high first), then round-robin over tenants (a row's turn is its rank among its tenant's due rows
# of that priority), then age: one tenant's backlog cannot keep another's first row waiting behind it. That
# order ranks every due row, so it runs only when there is a backlog to order.
# (`available_at + 0`: so that SQLite walks that index in order, not the (published_at, available_at) one's
# range followed by a sort of what it finds.)
_DUE_WALKED = and_(outbox.c.published_at.is_(None), outbox.c.available_at + 0 <= _NOW)
DUE_IN_ORDER = (
    select(outbox.c.id, outbox.c.tenant)
    .where(_DUE_WALKED)
    .order_by(outbox.c.priority, outbox.c.id)
    .limit(bindparam("b_limit"))
)
# A row's turn: its rank among its tenant's due rows of that priority, plus the jobs its tenant runs now
# (ranks alone start over at every read: the tenant whose first row is oldest would win every small one).
_TURN = func.row_number().over(partition_by=(outbox.c.priority, outbox.c.tenant), order_by=outbox.c.id)
_RUNNING = tenantcap.RUNNING_BY_TENANT
_RANKED = (
    select(
        outbox.c.id,
        outbox.c.tenant,
        outbox.c.priority,
        (_TURN + func.coalesce(_RUNNING.c.running, 0)).label("turn"),
    )
    .select_from(outbox.outerjoin(_RUNNING, _RUNNING.c.tenant == outbox.c.tenant))
    .where(_DUE)
    .subquery("ranked")
)
_FAIR = (
    select(_RANKED.c.id, _RANKED.c.tenant)
    .order_by(_RANKED.c.priority, _RANKED.c.turn, _RANKED.c.id)
    .limit(bindparam("b_limit"))
)
_JOB_IDS: BindParameter[str] = bindparam("b_job_ids", expanding=True)


def _by_job(conn: Connection, query: Select[Any], job_ids: Sequence[str]) -> dict[str, tuple[Any, ...]]:
    """What `query` (the job's id, then other columns of `jobs`) reads for `job_ids`, by job id: one indexed
    lookup."""
    if not job_ids:
        return {}
    return {str(r[0]): tuple(r[1:]) for r in db.direct_in(conn, query, {}, "b_job_ids", job_ids)}


def due_order(conn: Connection, *, now: float, limit: int, tenant_cap: int = 0) -> list[int]:
    """The ids of the due, unpublished rows a read of `limit` takes, in the order it takes them: every one
    when there are no more than `limit`; else by priority, then a turn per tenant, then age. With a
    `tenant_cap` (`TENANT_MAX_RUNNING`), a tenant gets no more rows than it may start jobs now: the rest wait
    here, not in the queue, where a consumer could only hand them back."""
    rows = [(int(r[0]), str(r[1])) for r in db.run(conn, DUE_IN_ORDER, {"b_now": now, "b_limit": limit + 1})]
    if len(rows) > limit and _several_tenants(conn):
        rows = [(int(r[0]), str(r[1])) for r in conn.execute(_FAIR, {"b_now": now, "b_limit": 2 * limit})]
    if tenant_cap:
        rows = _within_cap(conn, rows, tenant_cap)
    return [row_id for row_id, _ in rows[:limit]]


def tenant_range(hint: str | None = None) -> Select[Any]:
    """The lowest and the highest tenant of the unpublished rows: two seeks of their tenant index (one
    tenant's backlog has no turns to rank). A driver names the index for its database with `hint`."""

    def extreme(of: Any) -> Any:
        query = select(of(outbox.c.tenant)).where(outbox.c.published_at.is_(None))
        return (query if hint is None else query.with_hint(outbox, hint)).scalar_subquery()

    return select(extreme(func.min), extreme(func.max))


TENANT_RANGE = tenant_range()


def _several_tenants(conn: Connection) -> bool:
    [(lowest, highest)] = db.run(conn, TENANT_RANGE, {})
    return bool(lowest != highest)


def _within_cap(conn: Connection, rows: list[tuple[int, str]], cap: int) -> list[tuple[int, str]]:
    running = tenantcap.running(conn, {tenant for _, tenant in rows})
    admitted = set(tenantcap.admit([(str(i), tenant) for i, tenant in rows], running, cap)[0])
    return [row for row in rows if str(row[0]) in admitted]


# The job's tenant, kind and trace context for its `published` event: in the mark's own statement
# (`EVENT_FACTS_RETURNED`), or read by job id after it (`event_facts`), as the driver chooses.
_EVENT_COLUMNS = (jobs.c.tenant, jobs.c.kind, jobs.c.traceparent)
# A mark's RETURNING: each marked row's job id, then its job's columns for the event
# (`note_published_rows`).
EVENT_FACTS_RETURNED = (
    outbox.c.job_id,
    *(select(column).where(jobs.c.id == outbox.c.job_id).scalar_subquery() for column in _EVENT_COLUMNS),
)
_EVENT_FACTS = select(jobs.c.id, *_EVENT_COLUMNS).where(jobs.c.id.in_(_JOB_IDS))


def event_facts(conn: Connection, job_ids: Sequence[str]) -> list[tuple[Any, ...]]:
    """(job id, tenant, kind, trace context) of each of `job_ids`, for its `published` event."""
    found = _by_job(conn, _EVENT_FACTS, job_ids)
    return [(job_id, *found.get(job_id, (None, None, None))) for job_id in job_ids]


def note_published_rows(conn: Connection, rows: Sequence[Sequence[Any]]) -> int:
    """The `published` event of each marked row, given as (job id, tenant, kind, trace context): what
    `EVENT_FACTS_RETURNED` returns. Returns how many rows there were."""
    events.note(
        conn,
        (
            job_event("published", str(row[0]), tenant=row[1], kind=row[2], trace_id=trace_id_of(row[3]))
            for row in rows
        ),
    )
    return len(rows)


def prune_published(conn: Connection, *, older_than: float, limit: int = 5000) -> int:
    """Delete rows published before `older_than`, at most `limit` at a time."""
    ids = select(outbox.c.id).where(outbox.c.published_at < older_than).limit(limit)
    result = conn.execute(delete(outbox).where(outbox.c.id.in_(ids)))
    return int(result.rowcount)


_EARLIEST = select(func.min(outbox.c.available_at)).where(outbox.c.published_at.is_(None))
_NEXT_DUE = _EARLIEST.where(outbox.c.available_at > _NOW)


def earliest_unpublished(conn: Connection) -> float | None:
    """When the earliest unpublished row came or comes due (due now when it is not after now), or None."""
    due = conn.execute(_EARLIEST).scalar()
    return None if due is None else float(due)


def next_due(conn: Connection, now: float) -> float | None:
    """When the earliest unpublished row that is not due at `now` comes due (a delayed job's, a retry's),
    or None: a relay that leased everything due sets its timer for it."""
    due = db.run(conn, _NEXT_DUE, {"b_now": now})[0][0]
    return None if due is None else float(due)


@dataclass(frozen=True)
class Backlog:
    pending: int
    oldest_age_seconds: float


def backlog(conn: Connection, now: float) -> Backlog:
    """Unpublished rows that are due, and how long the oldest of them has waited."""
    row = conn.execute(
        select(func.count(), func.min(outbox.c.available_at)).where(
            outbox.c.published_at.is_(None), outbox.c.available_at <= now
        )
    ).one()
    oldest = float(row[1]) if row[1] is not None else now
    return Backlog(pending=int(row[0]), oldest_age_seconds=max(0.0, now - oldest))

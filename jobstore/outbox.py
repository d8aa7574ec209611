"""The outbox: rows that say "job X needs attention", published by a relay under a fenced row lease.

A relay leases a batch with a fresh token; only the holder of that token may mark its rows published, so a
relay that stalled past its lease cannot mark rows another relay has taken over."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Float,
    Integer,
    Select,
    and_,
    any_,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql.dml import Update

from outbox_bridge.jobstore import db, doorbells, events, tenantcap
from outbox_bridge.jobstore.schema import SQLITE_BY_ROWID, jobs, outbox
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
    """The unpublished rows of the jobs `of_jobs` picks, deleted; on SQLite found through the job id's
    index (`jobstore.schema.SQLITE_JOBS_BY_ID` says why it is named)."""
    return (
        delete(outbox)
        .with_hint("INDEXED BY ix_outbox_job_id", dialect_name="sqlite")
        .where(of_jobs, outbox.c.published_at.is_(None))
    )


_DROP_PENDING = _drop_pending(outbox.c.job_id == bindparam("b_job"))
_DROP_PENDING_MANY = _drop_pending(outbox.c.job_id.in_(bindparam("b_jobs", expanding=True)))
_NOW = bindparam("b_now", type_=Float)
_IDS: BindParameter[int] = bindparam("b_ids", expanding=True)


def add(conn: Connection, job_id: str, *, available_at: float, now: float) -> None:
    """Queue a delivery of `job_id` that comes due at `available_at`; the relays are rung when the caller's
    transaction commits (`jobstore.doorbells`)."""
    conn.execute(
        _INSERT_FOR_JOB,
        {"job_id": job_id, "created_at": now, "available_at": available_at, "publish_attempts": 0},
    )
    doorbells.note_outbox_row(conn, available_at)


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
    doorbells.note_outbox_row(conn, min(at for _, at, _ in deliveries))


# SQLite's accept (PostgreSQL's writes these rows in its one statement, `intake._ACCEPT_PG`).
_INSERT_ACCEPTED = db.Direct.of(
    insert(outbox).values(
        {c: bindparam(c) for c in ("job_id", "created_at", "available_at", "tenant", "priority")}
        | {"publish_attempts": 0}
    ),
    dialect="sqlite",
)


def add_accepted(conn: Connection, job_rows: Sequence[Mapping[str, Any]]) -> None:
    """`add` for jobs being accepted in this transaction on SQLite, from their rows (id, tenant, priority,
    available at, created at), in one call into the driver."""
    if not job_rows:
        return
    db.direct_many(
        conn,
        _INSERT_ACCEPTED,
        [
            {"job_id": row["id"], "created_at": row["created_at"], "available_at": row["available_at"],
             "tenant": row["tenant"], "priority": row["priority"]}
            for row in job_rows
        ],
    )  # fmt: skip
    doorbells.note_outbox_row(conn, min(row["available_at"] for row in job_rows))


def drop_pending(conn: Connection, job_id: str) -> None:
    """Forget unpublished deliveries of a job that no longer needs one (claimed directly, or cancelled)."""
    conn.execute(_DROP_PENDING, {"b_job": job_id})


def drop_pending_many(conn: Connection, job_ids: Sequence[str]) -> None:
    """`drop_pending` for each of `job_ids`, in one statement."""
    if job_ids:
        conn.execute(_DROP_PENDING_MANY, {"b_jobs": list(job_ids)})


@dataclass(frozen=True)
class Lease:
    token: str
    rows: tuple[tuple[int, str], ...]  # (outbox id, job id)
    # The trace context stored with each leased job that has one (`jobs.traceparent`), by job id.
    traceparents: Mapping[str, str] = field(default_factory=dict)
    # (priority, tenant) by outbox id: what a consumer orders the deliveries it holds by.
    orders: Mapping[int, tuple[int, str]] = field(default_factory=dict)


# No live row lease holds the row.
UNLEASED = or_(outbox.c.lease_expires_at.is_(None), outbox.c.lease_expires_at <= _NOW)
_DUE = and_(outbox.c.published_at.is_(None), outbox.c.available_at <= _NOW, UNLEASED)
# Two orders. While no more rows are due than a lease takes, the oldest walk of the (published_at, priority,
# id) index finds them all, and their order does not matter. When more are due, the lease takes them by
# priority (high first), then round-robin over tenants (a row's turn is its rank among its tenant's due rows
# of that priority), then age: one tenant's backlog cannot keep another's first row waiting behind it. That
# order ranks every due row, so it runs only when there is a backlog to order.
# (`available_at + 0`: so that SQLite walks that index in order, not the (published_at, available_at) one's
# range followed by a sort of what it finds.)
_DUE_WALKED = and_(
    outbox.c.published_at.is_(None),
    outbox.c.available_at + 0 <= _NOW,
    UNLEASED,
)
_ORDERED = (
    select(outbox.c.id, outbox.c.tenant)
    .with_hint(outbox, "INDEXED BY ix_outbox_due_priority_id", dialect_name="sqlite")
    .where(_DUE_WALKED)
    .order_by(outbox.c.priority, outbox.c.id)
    .limit(bindparam("b_limit"))
)
# A row's turn: its rank among its tenant's due rows of that priority, plus the jobs its tenant runs now
# (ranks alone start over at every lease: the tenant whose first row is oldest would win every small one).
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
_ORDERED_SKIP_LOCKED = _ORDERED.with_for_update(skip_locked=True)
_ORDERED_SQLITE = db.Direct.of(_ORDERED, dialect="sqlite")
_LOCK_UNLOCKED = select(outbox.c.id).where(outbox.c.id.in_(_IDS)).with_for_update(skip_locked=True)
_LEASE = (
    update(outbox)
    .with_hint(SQLITE_BY_ROWID, dialect_name="sqlite")
    .where(outbox.c.id.in_(_IDS), _DUE)
    .values(
        lease_token=bindparam("b_token"),
        lease_expires_at=bindparam("b_lease_until", type_=Float),
        publish_attempts=outbox.c.publish_attempts + 1,
    )
    .returning(outbox.c.id, outbox.c.job_id, outbox.c.priority, outbox.c.tenant)
)
# On PostgreSQL the job's trace context rides along in the same statement, a subquery per row. Not on SQLite:
# there a correlated subquery in RETURNING cannot use an index (3.40: `SCAN jobs` for every row returned), so
# a lease or a mark would read the whole jobs table once per row; `_by_job` reads them by id instead.
_LEASE_PG = _LEASE.returning(select(jobs.c.traceparent).where(jobs.c.id == outbox.c.job_id).scalar_subquery())
_JOB_IDS: BindParameter[str] = bindparam("b_job_ids", expanding=True)
_TRACEPARENTS = select(jobs.c.id, jobs.c.traceparent).where(jobs.c.id.in_(_JOB_IDS))


def _by_job(conn: Connection, query: Select[Any], job_ids: Sequence[str]) -> dict[str, tuple[Any, ...]]:
    """What `query` (the job's id, then other columns of `jobs`) reads for `job_ids`, by job id: one indexed
    lookup."""
    if not job_ids:
        return {}
    return {str(r[0]): tuple(r[1:]) for r in db.direct_in(conn, query, {}, "b_job_ids", job_ids)}


def lease_order(
    conn: Connection, *, now: float, limit: int, tenant_cap: int = 0, locking: bool = True
) -> list[int]:
    """The ids of the due, unpublished rows no live lease holds that a lease of `limit` takes, in the order
    it takes them: every one when there are no more than `limit`; else by priority, then a turn per tenant,
    then age. On PostgreSQL, `locking` (a lease about to write them) locks the rows it walks and skips the
    rows another relay's lease transaction holds locked; a read (`locking=False`, the relay role's) locks
    nothing. With a `tenant_cap` (`TENANT_MAX_RUNNING`), a tenant gets no more rows than it may start jobs
    now: the rest wait here, not in the queue, where a consumer could only hand them back."""
    params = {"b_now": now, "b_limit": limit + 1}
    postgres = conn.dialect.name == "postgresql"
    if postgres:
        rows = [
            (int(r[0]), str(r[1]))
            for r in conn.execute(_ORDERED_SKIP_LOCKED if locking else _ORDERED, params)
        ]
    else:
        rows = [(int(r[0]), str(r[1])) for r in db.direct(conn, _ORDERED_SQLITE, params)]
    if len(rows) > limit and _several_tenants(conn):
        ranked = [(int(r[0]), str(r[1])) for r in conn.execute(_FAIR, {"b_now": now, "b_limit": 2 * limit})]
        if postgres and locking:  # the ranking cannot lock: the rows no other lease holds, then the walk's
            free = set(conn.execute(_LOCK_UNLOCKED, {"b_ids": [i for i, _ in ranked]}).scalars())
            rows = [r for r in ranked if r[0] in free] + [r for r in rows if r[0] not in free]
        else:
            rows = ranked
    if tenant_cap:
        rows = _within_cap(conn, rows, tenant_cap)
    return [row_id for row_id, _ in rows[:limit]]


def _unpublished_tenant(extreme: Any) -> Any:
    """`extreme` (`func.min` or `func.max`) of the unpublished rows' tenants: one seek of their index."""
    return (
        select(extreme(outbox.c.tenant))
        .with_hint(outbox, "INDEXED BY ix_outbox_due_tenant", dialect_name="sqlite")
        .where(outbox.c.published_at.is_(None))
        .scalar_subquery()
    )


# Two seeks of the unpublished rows' tenant index: one tenant's backlog has no turns to rank.
_TENANT_RANGE = select(_unpublished_tenant(func.min), _unpublished_tenant(func.max))


def _several_tenants(conn: Connection) -> bool:
    lowest, highest = conn.execute(_TENANT_RANGE).one()
    return bool(lowest != highest)


def _within_cap(conn: Connection, rows: list[tuple[int, str]], cap: int) -> list[tuple[int, str]]:
    running = tenantcap.running(conn, {tenant for _, tenant in rows})
    admitted = set(tenantcap.admit([(str(i), tenant) for i, tenant in rows], running, cap)[0])
    return [row for row in rows if str(row[0]) in admitted]


def lease_batch(
    conn: Connection, *, now: float, limit: int, lease_seconds: float, tenant_cap: int = 0
) -> Lease:
    """Lease up to `limit` due, unpublished rows that no live lease holds, in `lease_order`. The lease's
    rows keep that order (the relay publishes them in it)."""
    return lease_due(conn, now=now, limit=limit, lease_seconds=lease_seconds, tenant_cap=tenant_cap)[0]


def lease_due(
    conn: Connection,
    *,
    now: float,
    limit: int,
    lease_seconds: float,
    tenant_cap: int = 0,
) -> tuple[Lease, float | None]:
    """`lease_batch`, and, when it took fewer than `limit` rows, when the earliest row not yet due comes due
    (`next_due`; None otherwise). On PostgreSQL without a `tenant_cap`, one statement does it all whenever
    the walk's order is the lease's (`_LEASE_IN_ONE`)."""
    token = str(uuid.uuid4())
    if conn.dialect.name == "postgresql" and not tenant_cap:
        done = _lease_in_one(conn, token, now=now, limit=limit, lease_seconds=lease_seconds)
        if done is not None:
            return done
    lease = _lease_ordered(
        conn, token, now=now, limit=limit, lease_seconds=lease_seconds, tenant_cap=tenant_cap
    )
    return lease, next_due(conn, now) if len(lease.rows) < limit else None


# PostgreSQL: `lease_order`'s walk, `_LEASE_PG` and `next_due` in one statement (one round trip where they
# took three). It leases nothing (`serves` false) when more rows are due than the lease takes and they
# belong to several tenants: that lease needs `_FAIR`'s ranking, and `_lease_ordered` runs after it, in
# the same transaction (`lease_due`).
_LEASE_IN_ONE = db.Direct.of(
    text("""
WITH due AS (
    SELECT id, tenant, priority FROM outbox
    WHERE published_at IS NULL AND available_at <= :b_now
      AND (lease_expires_at IS NULL OR lease_expires_at <= :b_now)
    ORDER BY priority, id
    LIMIT :b_walk
    FOR UPDATE SKIP LOCKED
), walk AS (
    SELECT count(*) <= :b_limit
        OR (SELECT min(tenant) FROM outbox WHERE published_at IS NULL)
            = (SELECT max(tenant) FROM outbox WHERE published_at IS NULL) AS serves
    FROM due
), chosen AS (
    SELECT id FROM due WHERE (SELECT serves FROM walk) ORDER BY priority, id LIMIT :b_limit
), leased AS (
    UPDATE outbox SET lease_token = :b_token, lease_expires_at = :b_lease_until,
        publish_attempts = outbox.publish_attempts + 1
    FROM chosen WHERE outbox.id = chosen.id
    RETURNING outbox.id, outbox.job_id, outbox.priority, outbox.tenant,
        (SELECT traceparent FROM jobs WHERE jobs.id = outbox.job_id) AS traceparent
)
SELECT walk.serves,
    (SELECT min(available_at) FROM outbox WHERE published_at IS NULL AND available_at > :b_now) AS next_due,
    leased.id, leased.job_id, leased.priority, leased.tenant, leased.traceparent
FROM walk LEFT JOIN leased ON true
ORDER BY leased.priority, leased.id
"""),
    prepared=True,
)


def _lease_in_one(
    conn: Connection, token: str, *, now: float, limit: int, lease_seconds: float
) -> tuple[Lease, float | None] | None:
    """The lease and `next_due` from `_LEASE_IN_ONE`, or None when its walk's order does not serve."""
    params = {"b_now": now, "b_limit": limit, "b_walk": limit + 1, "b_token": token,
              "b_lease_until": now + lease_seconds}  # fmt: skip
    return walked_in_one(token, db.direct(conn, _LEASE_IN_ONE, params), limit)


def walked_in_one(
    token: str, returned: Sequence[Sequence[Any]], limit: int
) -> tuple[Lease, float | None] | None:
    """The rows of a one-statement walk (`_LEASE_IN_ONE`, the relay role's `due_at_once`) as a `Lease` under
    `token`, with `next_due` when it found fewer than `limit`; None when the walk's order did not serve.
    Each row returned: serves, next_due, then a row's id, job id, priority, tenant and trace context (all
    null when it found none)."""
    serves, due = returned[0][:2]
    if not serves:
        return None
    rows = [r[2:] for r in returned if r[2] is not None]
    lease = Lease(
        token,
        tuple((int(row_id), str(job_id)) for row_id, job_id, *_ in rows),
        {str(job_id): str(tp) for _, job_id, _, _, tp in rows if tp is not None},
        {int(row_id): (int(priority), str(tenant)) for row_id, _, priority, tenant, _ in rows},
    )
    return lease, float(due) if due is not None and len(rows) < limit else None


def _lease_ordered(
    conn: Connection, token: str, *, now: float, limit: int, lease_seconds: float, tenant_cap: int
) -> Lease:
    """Lease the rows `lease_order` chooses, in its order, under `token`."""
    ids = lease_order(conn, now=now, limit=limit, tenant_cap=tenant_cap)
    if not ids:
        return Lease(token, ())
    params = {"b_now": now, "b_token": token, "b_lease_until": now + lease_seconds}
    returned: Sequence[Any]
    if conn.dialect.name == "postgresql":
        returned = conn.execute(_LEASE_PG, params | {"b_ids": ids}).all()
        traced = {str(r[1]): r[4] for r in returned}
    else:
        returned = db.direct_in(conn, _LEASE, params, "b_ids", ids)
        found = _by_job(conn, _TRACEPARENTS, [str(r[1]) for r in returned])
        traced = {job_id: row[0] for job_id, row in found.items()}
    taken = {int(r[0]): str(r[1]) for r in returned}
    traceparents = {job_id: str(tp) for job_id, tp in traced.items() if tp is not None}
    orders = {int(r[0]): (int(r[2]), str(r[3])) for r in returned}
    return Lease(
        token, tuple((row_id, taken[row_id]) for row_id in ids if row_id in taken), traceparents, orders
    )


def _mark(rows: ColumnElement[bool]) -> Update:
    return (
        update(outbox)
        .with_hint(SQLITE_BY_ROWID, dialect_name="sqlite")
        .where(rows, outbox.c.lease_token == bindparam("b_token"), outbox.c.published_at.is_(None))
        .values(published_at=_NOW, lease_token=None, lease_expires_at=None)
    )


_MARK = _mark(outbox.c.id.in_(_IDS)).returning(outbox.c.job_id)
# The job's tenant, kind and trace context for its `published` event: in the same statement on PostgreSQL
# (run below SQLAlchemy, `db.direct`), by `_by_job` on SQLite (see `_LEASE_PG`).
_EVENT_COLUMNS = (jobs.c.tenant, jobs.c.kind, jobs.c.traceparent)
# A PostgreSQL mark's RETURNING: each marked row's job id, then its job's columns for the event
# (`note_published_rows`).
EVENT_FACTS_RETURNED = (
    outbox.c.job_id,
    *(select(column).where(jobs.c.id == outbox.c.job_id).scalar_subquery() for column in _EVENT_COLUMNS),
)
_MARK_PG = db.Direct.of(
    _mark(outbox.c.id == any_(bindparam("b_ids", type_=ARRAY(Integer)))).returning(*EVENT_FACTS_RETURNED)
)
_EVENT_FACTS = select(jobs.c.id, *_EVENT_COLUMNS).where(jobs.c.id.in_(_JOB_IDS))


def mark_published(conn: Connection, token: str, ids: Sequence[int], now: float) -> int:
    """Mark confirmed rows published; only rows still leased under `token` change. Returns how many did."""
    if not ids:
        return 0
    params = {"b_ids": list(ids), "b_token": token, "b_now": now}
    if conn.dialect.name == "postgresql":
        return note_published_rows(conn, db.direct(conn, _MARK_PG, params))
    marked = [str(r[0]) for r in db.direct_in(conn, _MARK, {"b_token": token, "b_now": now}, "b_ids", ids)]
    return note_published_rows(conn, _event_facts(conn, marked))


def _event_facts(conn: Connection, job_ids: Sequence[str]) -> list[tuple[Any, ...]]:
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


def note_published(conn: Connection, job_ids: Sequence[str]) -> None:
    """The `published` event of each of `job_ids`, marked in the caller's transaction by another path
    (`jobstore.relayrole` on SQLite)."""
    note_published_rows(conn, _event_facts(conn, job_ids))


def release(conn: Connection, token: str, ids: Sequence[int], *, retry_at: float) -> int:
    """Give back rows that were nacked, returned or never confirmed, so they are published again later."""
    if not ids:
        return 0
    result = conn.execute(
        update(outbox)
        .where(outbox.c.id.in_(list(ids)), outbox.c.lease_token == token, outbox.c.published_at.is_(None))
        .values(lease_token=None, lease_expires_at=None, available_at=retry_at)
    )
    return int(result.rowcount)


def prune_published(conn: Connection, *, older_than: float, limit: int = 5000) -> int:
    """Delete rows published before `older_than`, at most `limit` at a time."""
    ids = select(outbox.c.id).where(outbox.c.published_at < older_than).limit(limit)
    result = conn.execute(delete(outbox).where(outbox.c.id.in_(ids)))
    return int(result.rowcount)


_EARLIEST = select(func.min(outbox.c.available_at)).where(outbox.c.published_at.is_(None))
_NEXT_DUE = _EARLIEST.where(outbox.c.available_at > _NOW)
_NEXT_DUE_SQLITE = db.Direct.of(_NEXT_DUE, dialect="sqlite")


def earliest_unpublished(conn: Connection) -> float | None:
    """When the earliest unpublished row came or comes due (due now when it is not after now), or None."""
    due = conn.execute(_EARLIEST).scalar()
    return None if due is None else float(due)


def next_due(conn: Connection, now: float) -> float | None:
    """When the earliest unpublished row that is not due at `now` comes due (a delayed job's, a retry's),
    or None: a relay that leased everything due sets its timer for it."""
    if conn.dialect.name == "sqlite":
        due = db.direct(conn, _NEXT_DUE_SQLITE, {"b_now": now})[0][0]
    else:
        due = conn.execute(_NEXT_DUE, {"b_now": now}).scalar()
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

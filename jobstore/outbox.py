"""The outbox: rows that say "job X needs attention", written in the transaction that needs the attention
and published by the relay that holds the relay role (`jobstore.leader`: its reads of the due rows, in
`due_order`, and its fenced marks)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from outbox_bridge.jobstore import db, events, tenantcap
from outbox_bridge.telemetry.logs import job_event
from outbox_bridge.telemetry.tracing import trace_id_of


def add(conn: Connection, job_id: str, *, available_at: float, now: float) -> None:
    """Queue a delivery of `job_id` that comes due at `available_at`; the relays are notified when the
    caller's transaction commits (`Driver.announce`)."""
    db.execute(conn, "outbox_add", {"job_id": job_id, "created_at": now, "available_at": available_at})
    events.note_outbox_row(conn, available_at)


def add_many(conn: Connection, deliveries: Sequence[tuple[str, float, float]]) -> None:
    """`add` for each (job id, available at, now), in one call into the database's driver."""
    if not deliveries:
        return
    db.execute_many(
        conn,
        "outbox_add",
        [{"job_id": job_id, "created_at": now, "available_at": at} for job_id, at, now in deliveries],
    )
    events.note_outbox_row(conn, min(at for _, at, _ in deliveries))


def drop_pending(conn: Connection, job_id: str) -> None:
    """Forget unpublished deliveries of a job that no longer needs one (claimed directly, or cancelled)."""
    db.execute(conn, "outbox_drop_pending", {"job_id": job_id})


@dataclass(frozen=True)
class Lease:
    token: str
    rows: tuple[tuple[int, str], ...]  # (outbox id, job id)
    # The trace context stored with each leased job that has one (`jobs.traceparent`), by job id.
    traceparents: Mapping[str, str] = field(default_factory=dict)
    # (priority, tenant) by outbox id: what a consumer orders the deliveries it holds by.
    orders: Mapping[int, tuple[int, str]] = field(default_factory=dict)
    # The named queue of each leased job (`jobs.queue`), by job id: where the relay publishes it.
    queues: Mapping[str, str] = field(default_factory=dict)
    # The kind of each leased job (`jobs.kind`), by job id: named by the relay's `publish` span.
    kinds: Mapping[str, str] = field(default_factory=dict)


# Two orders. While no more rows are due than a read takes, the oldest walk of the (published_at, priority,
# id) index finds them all, and their order does not matter (`outbox_due_in_order`). When more are due, the
# read takes them by priority (high first), then round-robin over tenants (a row's turn is its rank among
# its tenant's due rows of that priority), then age: one tenant's backlog cannot keep another's first row
# waiting behind it (`outbox_due_by_turns`). That order ranks every due row, so it runs only when there is a
# backlog to order.


def due_order(conn: Connection, *, now: float, limit: int, tenant_cap: int = 0) -> list[int]:
    """The ids of the due, unpublished rows a read of `limit` takes, in the order it takes them: every one
    when there are no more than `limit`; else by priority, then a turn per tenant, then age. With a
    `tenant_cap` (`TENANT_MAX_RUNNING`), a tenant gets no more rows than it may start jobs now: the rest wait
    here, not in the queue, where a consumer could only hand them back."""
    walked = db.execute(conn, "outbox_due_in_order", {"now": now, "limit": limit + 1})
    rows = [(int(r[0]), str(r[1])) for r in walked]
    if len(rows) > limit and _several_tenants(conn):
        ranked = db.execute(conn, "outbox_due_by_turns", {"now": now, "limit": 2 * limit})
        rows = [(int(r[0]), str(r[1])) for r in ranked]
    if tenant_cap:
        rows = _within_cap(conn, rows, tenant_cap)
    return [row_id for row_id, _ in rows[:limit]]


def _several_tenants(conn: Connection) -> bool:
    [(lowest, highest)] = db.execute(conn, "outbox_tenant_range")
    return bool(lowest != highest)


def _within_cap(conn: Connection, rows: list[tuple[int, str]], cap: int) -> list[tuple[int, str]]:
    running = tenantcap.running(conn, {tenant for _, tenant in rows})
    admitted = set(tenantcap.admit([(str(i), tenant) for i, tenant in rows], running, cap)[0])
    return [row for row in rows if str(row[0]) in admitted]


def note_published_rows(conn: Connection, rows: Sequence[Sequence[Any]]) -> int:
    """The `published` event of each marked row, given as (job id, tenant, kind, trace context): what
    `Driver.mark_published` returns. Returns how many rows there were."""
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
    return len(db.execute(conn, "outbox_prune_published", {"older_than": older_than, "limit": limit}))


def earliest_unpublished(conn: Connection) -> float | None:
    """When the earliest unpublished row came or comes due (due now when it is not after now), or None."""
    due = db.execute(conn, "outbox_earliest_unpublished")[0][0]
    return None if due is None else float(due)


def next_due(conn: Connection, now: float) -> float | None:
    """When the earliest unpublished row that is not due at `now` comes due (a delayed job's, a retry's),
    or None: a relay that leased everything due sets its timer for it."""
    due = db.execute(conn, "outbox_next_due", {"now": now})[0][0]
    return None if due is None else float(due)


@dataclass(frozen=True)
class Backlog:
    pending: int
    oldest_age_seconds: float


def backlog(conn: Connection, now: float) -> Backlog:
    """Unpublished rows that are due, and how long the oldest of them has waited."""
    [(pending, oldest)] = db.execute(conn, "outbox_backlog", {"now": now})
    oldest = float(oldest) if oldest is not None else now
    return Backlog(pending=int(pending), oldest_age_seconds=max(0.0, now - oldest))

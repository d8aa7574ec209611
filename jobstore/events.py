"""What the transaction running on a connection noted, for `db.transact` to act on once it has committed:
its job events (each transition notes its events here as it makes its move; they go to the log,
`telemetry.logs.emit`) and the earliest due time of the outbox rows it added (the relays are told of it,
`Driver.announce`). A transaction that rolls back, or runs again, acts on nothing of what it had noted."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, NamedTuple

from sqlalchemy import Connection

from outbox_bridge.jobstore.records import Claim, Job
from outbox_bridge.telemetry.logs import JobEvent, job_event
from outbox_bridge.telemetry.tracing import trace_id_of

_KEY = "outbox_bridge.job_events"
_DUE_KEY = "outbox_due"  # the earliest available_at of the outbox rows the transaction added


class Returned(NamedTuple):
    """What a move's RETURNING clause adds, in this order (`id, tenant, kind, epoch, attempts, traceparent`),
    so that its event is built without another statement (`of_row`)."""

    id: str
    tenant: str
    kind: str
    epoch: int
    attempts: int
    traceparent: str | None


def of_job(event: str, job: Job, **more: Any) -> JobEvent:
    """The event `event` of `job` as a row read or returned in the transaction shows it."""
    return job_event(
        event, job.id, tenant=job.tenant, kind=job.kind, epoch=job.epoch, attempt=job.attempts,
        trace_id=trace_id_of(job.traceparent), **more,
    )  # fmt: skip


def of_claim(event: str, claim: Claim, **more: Any) -> JobEvent:
    """The event `event` of the job `claim` holds, as the claim took it."""
    return job_event(
        event, claim.job_id, tenant=claim.tenant, kind=claim.kind, epoch=claim.epoch, attempt=claim.attempts,
        trace_id=trace_id_of(claim.traceparent), worker=claim.worker, **more,
    )  # fmt: skip


def of_row(event: str, row: Any, **more: Any) -> JobEvent:
    """The event `event` of the job whose RETURNING `row` holds what `Returned` names."""
    return job_event(
        event, str(row.id), tenant=row.tenant, kind=row.kind, epoch=row.epoch, attempt=row.attempts,
        trace_id=trace_id_of(row.traceparent), **more,
    )  # fmt: skip


def note(conn: Connection, events: Iterable[JobEvent]) -> None:
    """Add `events` to those of the transaction running on `conn`."""
    conn.info.setdefault(_KEY, []).extend(events)


def forget(conn: Connection) -> None:
    """Drop what an earlier transaction on this connection noted (it rolled back)."""
    conn.info.pop(_KEY, None)
    conn.info.pop(_DUE_KEY, None)


def committed(conn: Connection) -> list[JobEvent]:
    """The events of the transaction just committed on `conn`, in the order noted; clears them."""
    events: list[JobEvent] = conn.info.pop(_KEY, [])
    return events


def note_outbox_row(conn: Connection, available_at: float) -> None:
    """Record, in the caller's transaction, that it adds an outbox row coming due at `available_at`; the
    relays are told once the transaction commits."""
    info = conn.info
    info[_DUE_KEY] = min(available_at, info.get(_DUE_KEY, math.inf))


def outbox_due(conn: Connection) -> float | None:
    """The earliest due time the transaction just committed on `conn` added, or None; clears it."""
    due: float | None = conn.info.pop(_DUE_KEY, None)
    return due

"""Pausing a kind: while a kind is paused no claim starts a queued job of it, and resuming it lets them start
in their order. A running job of a paused kind runs on to its end.

The claim decides (`claiming`): its statements pass over the queued jobs of the kinds in `paused_kinds`
(`NOT_PAUSED`, read in the claim's own statement, so a pause is in force for every claim that starts after
it commits). A job passed over spends no attempt and keeps its place. A consumer whose delivery names a job
of a paused kind acks the delivery without running it (`claiming.Refusal.KIND_PAUSED`): no redelivery loop,
nothing dead-lettered, and the job stays queued with nothing left to deliver it. Resuming the kind gives
every such job a new outbox row, in the order the jobs start in (priority, then age), in the transaction
that resumes it; the baseline's claims find them in the table. Jobs whose delivery was still on its way
are announced twice: the claim takes the job once and refuses the other delivery.

Who paused a kind and when is kept with the pause; each pause and resume is recorded (`kind_actions`)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, and_, case, delete, func, insert, literal, select

from outbox_bridge.jobstore import host_notify
from outbox_bridge.jobstore.schema import jobs, kind_actions, outbox, paused_kinds, state_is
from outbox_bridge.jobstore.states import State

# The job at hand is not of a paused kind: a condition of the claim's statements (a subquery of a table of a
# few rows, read once per statement).
NOT_PAUSED = jobs.c.kind.not_in(select(paused_kinds.c.kind))


@dataclass(frozen=True)
class PausedKind:
    kind: str
    paused_at: float
    paused_by: str
    note: str | None
    queued: int  # its queued jobs, held back


def pause(conn: Connection, kind: str, now: float, *, actor: str, note: str | None = None) -> bool:
    """Pause `kind`, recorded; False (and nothing recorded) when it is paused already."""
    if is_paused(conn, kind):
        return False
    conn.execute(insert(paused_kinds).values(kind=kind, paused_at=now, paused_by=actor, note=note or None))
    _record(conn, kind, "pause", actor=actor, note=note, now=now)
    return True


def resume(conn: Connection, kind: str, now: float, *, actor: str, note: str | None = None) -> int | None:
    """Resume `kind`, recorded, and announce its queued jobs that have no delivery waiting to be published
    (`announce_queued`); how many were announced, or None (nothing changed) when it was not paused."""
    if conn.execute(delete(paused_kinds).where(paused_kinds.c.kind == kind)).rowcount != 1:
        return None
    _record(conn, kind, "resume", actor=actor, note=note, now=now)
    return announce_queued(conn, kind, now)


def is_paused(conn: Connection, kind: str) -> bool:
    return conn.execute(select(paused_kinds.c.kind).where(paused_kinds.c.kind == kind)).first() is not None


def paused(conn: Connection) -> list[PausedKind]:
    """The paused kinds, the longest paused first, each with its count of queued jobs."""
    queued = (
        select(func.count())
        .where(state_is(State.QUEUED), jobs.c.kind == paused_kinds.c.kind)
        .scalar_subquery()
    )
    rows = conn.execute(
        select(paused_kinds, queued.label("queued")).order_by(paused_kinds.c.paused_at, paused_kinds.c.kind)
    ).mappings()
    return [PausedKind(**row) for row in rows]


def paused_since(conn: Connection) -> dict[str, float]:
    """When each paused kind was paused."""
    rows = conn.execute(select(paused_kinds.c.kind, paused_kinds.c.paused_at))
    return {str(kind): float(at) for kind, at in rows}


_PENDING = select(outbox.c.id).where(outbox.c.job_id == jobs.c.id, outbox.c.published_at.is_(None)).exists()


def announce_queued(conn: Connection, kind: str, now: float) -> int:
    """Give each queued job of `kind` with no delivery waiting to be published a new outbox row, due when
    the job is (a delayed one at its start), written in the order the jobs start in, in one statement.
    Returns how many were announced."""
    due = case((jobs.c.available_at > now, jobs.c.available_at), else_=now)
    waiting = and_(state_is(State.QUEUED), jobs.c.kind == kind, ~_PENDING)
    rows = (
        select(jobs.c.id, literal(now), due, literal(0), jobs.c.tenant, jobs.c.priority)
        .where(waiting)
        .order_by(jobs.c.priority, jobs.c.available_at, jobs.c.id)
    )
    columns = ["job_id", "created_at", "available_at", "publish_attempts", "tenant", "priority"]
    announced = len(conn.execute(insert(outbox).from_select(columns, rows).returning(outbox.c.id)).all())
    if announced:
        host_notify.note_outbox_row(conn, now)
    return announced


def _record(conn: Connection, kind: str, action: str, *, actor: str, note: str | None, now: float) -> None:
    conn.execute(
        insert(kind_actions).values(kind=kind, action=action, actor=actor, note=note or None, at=now)
    )

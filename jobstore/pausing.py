"""Pausing a kind: while a kind is paused no claim starts a queued job of it, and resuming it lets them start
in their order. A running job of a paused kind runs on to its end.

The claim decides (`claiming`): its statements pass over the queued jobs of the kinds in `paused_kinds`
(read in the claim's own statement, so a pause is in force for every claim that starts after it commits).
A job passed over spends no attempt and keeps its place. A consumer whose delivery names a job of a paused
kind acks the delivery without running it (`claiming.Refusal.KIND_PAUSED`): no redelivery loop,
nothing dead-lettered, and the job stays queued with nothing left to deliver it. Resuming the kind gives
every such job a new outbox row, in the order the jobs start in (priority, then age), in the transaction
that resumes it; the baseline's claims find them in the table. Jobs whose delivery was still on its way
are announced twice: the claim takes the job once and refuses the other delivery.

Who paused a kind and when is kept with the pause; each pause and resume is recorded (`kind_actions`)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection

from outbox_bridge.jobstore import db, events


@dataclass(frozen=True)
class PausedKind:
    kind: str
    paused_at: float
    paused_by: str
    note: str | None
    queued: int  # its queued jobs, held back


def pause(conn: Connection, kind: str, now: float, *, actor: str, note: str | None = None) -> bool:
    """Pause `kind`, recorded; False (and nothing recorded) when it is paused already."""
    values = {"kind": kind, "now": now, "actor": actor, "note": note or None}
    if not db.execute(conn, "kind_pause", values):
        return False
    _record(conn, kind, "pause", actor=actor, note=note, now=now)
    return True


def resume(conn: Connection, kind: str, now: float, *, actor: str, note: str | None = None) -> int | None:
    """Resume `kind`, recorded, and announce its queued jobs that have no delivery waiting to be published
    (`announce_queued`); how many were announced, or None (nothing changed) when it was not paused."""
    if not db.execute(conn, "kind_resume", {"kind": kind}):
        return None
    _record(conn, kind, "resume", actor=actor, note=note, now=now)
    return announce_queued(conn, kind, now)


def is_paused(conn: Connection, kind: str) -> bool:
    return bool(db.execute(conn, "kind_is_paused", {"kind": kind}))


def paused(conn: Connection) -> list[PausedKind]:
    """The paused kinds, the longest paused first, each with its count of queued jobs."""
    return [PausedKind(*row) for row in db.execute(conn, "kind_paused")]


def paused_since(conn: Connection) -> dict[str, float]:
    """When each paused kind was paused."""
    return {str(kind): float(at) for kind, at in db.execute(conn, "kind_paused_since")}


def announce_queued(conn: Connection, kind: str, now: float) -> int:
    """Give each queued job of `kind` with no delivery waiting to be published a new outbox row, due when
    the job is (a delayed one at its start), written in the order the jobs start in, in one statement.
    Returns how many were announced."""
    announced = len(db.execute(conn, "kind_announce_queued", {"kind": kind, "now": now}))
    if announced:
        events.note_outbox_row(conn, now)
    return announced


def _record(conn: Connection, kind: str, action: str, *, actor: str, note: str | None, now: float) -> None:
    values = {"kind": kind, "action": action, "actor": actor, "note": note or None, "now": now}
    db.execute(conn, "kind_action_record", values)

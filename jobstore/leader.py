"""The leader: one relay at a time publishes the outbox, under a lease of the leadership itself (the relay
role, as the operators' docs and the table `relay_role` call it).

A relay leasing rows writes before every publish: one more write transaction on the path of every job,
where the accept before it and the claim after it take one each (on SQLite a hold of its single write lock,
on PostgreSQL a commit that waits for its WAL flush). The holder of the role instead reads the due rows,
publishes them, and writes only what the broker said, in groups: a confirmed row is marked published, a
refused one is held back a little (`hold_back`), one never confirmed needs no write at all (it is still
due). The relays that do not hold the role stand by, and take it when it expires or its holder's process
is gone (`LeaderClaim`). On PostgreSQL the read is one statement, committed by itself (`due_at_once`).

The promises of the row lease carry over. The role is held under a fresh token each time it is taken,
until `expires_at`, and renewed well before that; every write of the holder names its token and changes
nothing once the role has passed on (a holder that stalled past its expiry marks nothing: the new holder
reads those rows as due, and publishes them again).
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from outbox_bridge.core import clock
from outbox_bridge.jobstore import db, drivers
from outbox_bridge.jobstore.outbox import (
    Lease,
    due_order,
    earliest_unpublished,
    next_due,
    note_published_rows,
)

NAME = "relay"


@dataclass(frozen=True)
class Holder:
    token: str
    holder: str  # host:pid
    expires_at: float

    def gone(self) -> bool:
        """Its process is not running on this host (it cannot be told from another host)."""
        host, _, pid = self.holder.rpartition(":")
        if host != socket.gethostname() or not pid.isdigit():
            return False
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            pass
        return False


def me() -> str:
    """This process, as a holder names it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def current(conn: Connection) -> Holder | None:
    """Who holds the role, or held it last (None: nobody ever did)."""
    rows = db.execute(conn, "leader_current", {"name": NAME})
    return None if not rows else Holder(str(rows[0][0]), str(rows[0][1]), float(rows[0][2]))


def take(conn: Connection, token: str, *, now: float, seconds: float, gone: str | None = None) -> bool:
    """Take the role under `token` until `now + seconds`, or renew it: only when nobody holds it, it
    expired, its holder's token is `gone` (a process seen dead), or `token` holds it already."""
    values = {
        "name": NAME, "token": token, "holder": me(), "until": now + seconds, "now": now, "gone": gone or "",
    }  # fmt: skip
    return bool(db.execute(conn, "leader_take", values))


def give_up(conn: Connection, token: str) -> None:
    """Hand the role back at once (a relay shutting down): a standby takes it at its next look."""
    db.execute(conn, "leader_give_up", {"name": NAME, "token": token})


class LeaderClaim:
    """One relay's claim on the leadership (the role): `take_or_renew` at each of its looks (on one thread
    at a time), `give_up` when it stops or hands the role back, `close` at its end.

    A standby takes the role when nobody holds it, it expired, or its holder is gone: its pid no longer
    exists on the standby's own host (`Holder.gone`), or, where the database has a session lock
    (`leader_lock`: PostgreSQL's advisory locks), the holder's lock is free. The holder keeps that lock
    on a connection of its own while it holds the role, and the server lets go of it the moment that
    connection ends, a killed holder's on any host included; so a standby that finds it free while the role
    is held takes over at its next look instead of at the expiry. A holder that took the role while a
    stalled holder still kept the lock takes the lock at a later look; a live holder whose lock connection
    alone was cut loses the role to a standby, and the role's token fences its writes, as after an expiry."""

    def __init__(self, engine: Engine, seconds: float) -> None:
        self._engine = engine
        self._seconds = seconds
        self._conn: Connection | None = None
        self._locks = True  # until the database says it has no such lock
        self._locked = False
        self._mutex = threading.Lock()

    def take_or_renew(self, token: str | None) -> tuple[str | None, float]:
        """Renew the role under `token`, or (None) take it under a fresh token if it is free, expired or its
        holder is gone. Returns the token it holds the role under and until when, or (None, 0.0)."""
        with self._mutex:
            now = clock.now()
            gone = None
            if token is None:
                holder = db.read(self._engine, current)
                if holder is not None and holder.expires_at > now:
                    if not (holder.gone() or self._lock()):
                        return None, 0.0
                    gone = holder.token
                token = str(uuid.uuid4())
            if not db.transact(self._engine, take, token, now=now, seconds=self._seconds, gone=gone):
                self._unlock()
                return None, 0.0
            self._lock()
            return token, now + self._seconds

    def give_up(self, token: str) -> None:
        """Hand the role back (`give_up`) and let go of its lock."""
        with self._mutex:
            try:
                db.transact(self._engine, give_up, token)
            finally:
                self._unlock()

    def close(self) -> None:
        """End the lock's connection (and with it any lock it kept)."""
        with self._mutex:
            self._drop()

    def _lock(self) -> bool:
        """Hold the role's lock (`leader_lock`): True once held, False while another session holds it, or
        the database has none (NULL: the holder is then judged by its pid and its expiry alone), or does
        not answer."""
        if self._locked or not self._locks:
            return self._locked
        try:
            if self._conn is None:
                self._conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            [(held,)] = db.execute(self._conn, "leader_lock")
        except SQLAlchemyError:
            self._drop()  # the next look opens another
            return False
        if held is None:
            self._locks = False
            self._drop()
        self._locked = bool(held)
        return self._locked

    def _unlock(self) -> None:
        if not self._locked or self._conn is None:
            return
        self._locked = False
        try:
            db.execute(self._conn, "leader_unlock")
        except SQLAlchemyError:
            self._drop()

    def _drop(self) -> None:
        """Close the lock's connection for good (not back to the pool: its session ends, its lock with it)."""
        conn, self._conn, self._locked = self._conn, None, False
        if conn is not None:
            conn.invalidate()
            conn.close()


def due(
    conn: Connection,
    token: str,
    *,
    now: float,
    limit: int,
    exclude: Collection[int] = (),
    tenant_cap: int = 0,
) -> tuple[Lease, float | None]:
    """Read up to `limit` due rows in `outbox.due_order`, leaving out `exclude` (the rows
    the holder has published and not yet written back), as a `Lease` under the role's `token`; and, when
    it found fewer than `limit`, when the next row not yet due comes due. A read: it takes no write lock."""
    walked = due_order(conn, now=now, limit=limit + len(exclude), tenant_cap=tenant_cap)
    ids = [i for i in walked if i not in exclude][:limit]
    chosen = db.execute(conn, "outbox_rows_chosen", {"ids": drivers.of(conn).array(ids)}) if ids else []
    found = {int(r[0]): r for r in chosen}
    rows = [found[i] for i in ids if i in found]
    return _lease(token, rows), next_due(conn, now) if len(rows) < limit else None


def due_at_once(
    conn: Connection, token: str, *, now: float, limit: int, exclude: Collection[int] = ()
) -> tuple[Lease, float | None] | None:
    """Where the driver reads the due rows at once (`Driver.reads_due_in_one_statement`), without a tenant
    cap: `due` in one statement, which can run on its own (`db.read_one`), or None when more rows are due
    than the read takes and they belong to several tenants (`due` then ranks them)."""
    driver = drivers.of(conn)
    params = {"now": now, "limit": limit, "walk": limit + 1, "exclude": driver.array(list(exclude))}
    return _lease_of(token, db.execute(conn, "outbox_read_due", params), limit)


def _lease_of(token: str, returned: Sequence[Sequence[Any]], limit: int) -> tuple[Lease, float | None] | None:
    """The rows the read at once returned as a `Lease` under `token`, with `next_due` when it found fewer than
    `limit`; None when the walk's order did not serve. Each row returned: serves, next_due, then a row's
    id, job id, priority, tenant, trace context, queue and kind (all null when it found none)."""
    serves, due = returned[0][:2]
    if not serves:
        return None
    rows = [r[2:] for r in returned if r[2] is not None]
    return _lease(token, rows), float(due) if due is not None and len(rows) < limit else None


def _lease(token: str, rows: Sequence[Sequence[Any]]) -> Lease:
    """The rows read as a `Lease` under `token`; each row: id, job id, priority, tenant, trace context,
    queue, kind."""
    return Lease(
        token,
        tuple((int(row_id), str(job_id)) for row_id, job_id, *_ in rows),
        {str(job_id): str(tp) for _, job_id, _, _, tp, _, _ in rows if tp is not None},
        {int(row_id): (int(priority), str(tenant)) for row_id, _, priority, tenant, _, _, _ in rows},
        {str(job_id): str(queue) for _, job_id, _, _, _, queue, _ in rows},
        {str(job_id): str(kind) for _, job_id, _, _, _, _, kind in rows},
    )


def read(
    engine: Engine,
    token: str,
    *,
    now: float,
    limit: int,
    exclude: Collection[int] = (),
    tenant_cap: int = 0,
    idle: bool = False,
) -> tuple[Lease | None, float | None]:
    """The holder's read of up to `limit` due rows, leaving out `exclude` (`due`), in a read of its own. On
    a database read at once, without a `tenant_cap`, one statement that runs on its own (`due_at_once`: one
    round trip). Otherwise, when the outbox looked empty last time (`idle`), one look at the earliest row
    comes first: (None, when it comes due) while nothing is due."""
    if drivers.of(engine).reads_due_in_one_statement() and not tenant_cap:
        found = db.read_one(engine, due_at_once, token, now=now, limit=limit, exclude=exclude)
        if found is not None:
            return found
        idle = False  # rows are due: more than one read takes, of several tenants
    return db.read(engine, _read_due, token, now, limit, exclude, tenant_cap, idle)


def _read_due(
    conn: Connection,
    token: str,
    now: float,
    limit: int,
    exclude: Collection[int],
    tenant_cap: int,
    idle: bool,
) -> tuple[Lease | None, float | None]:
    if idle and not exclude:
        earliest = earliest_unpublished(conn)
        if earliest is None or earliest > now:
            return None, earliest
    return due(conn, token, now=now, limit=limit, exclude=exclude, tenant_cap=tenant_cap)


def _held(token: str, now: float) -> dict[str, Any]:
    """The values of the fence every write of the holder runs under: it changes a row only while `token`
    holds the role at `now`."""
    return {"name": NAME, "token": token, "now": now}


def mark_published(conn: Connection, token: str, ids: Sequence[int], now: float) -> int:
    """Mark confirmed rows published, while `token` holds the role, with a `published` event for each.
    Returns how many changed."""
    if not ids:
        return 0
    return note_published_rows(conn, drivers.of(conn).mark_published(conn, _held(token, now), ids))


def hold_back(conn: Connection, token: str, ids: Sequence[int], *, now: float, retry_at: float) -> int:
    """Rows the broker refused (nacked, returned) come due again at `retry_at`, while `token` holds the
    role. Returns how many changed."""
    if not ids:
        return 0
    params = {**_held(token, now), "retry_at": retry_at, "ids": drivers.of(conn).array(ids)}
    return len(db.execute(conn, "outbox_hold_back", params))

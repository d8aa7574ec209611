"""What writing in the caller's own transaction needs (`enqueue`, `enqueue_many`, `enqueue_batch`): the store
behind the caller's connection checked, once per engine, and the relays told once the caller commits.

After the commit the relays are told at once: on PostgreSQL by the outbox table's trigger (NOTIFY is sent
at commit), on SQLite by a datagram to their notify sockets when the connection goes back to its engine's
pool after the transaction committed (as `with engine.begin()` and a `Session` do). A connection kept
open across several transactions tells them when it is returned; until then the relay finds the job by
its own poll.
"""

from __future__ import annotations

import math
import sqlite3
import threading
import weakref
from typing import Any

from sqlalchemy import Connection, Engine, event

from outbox_bridge.client.errors import StoreMismatch
from outbox_bridge.jobstore import drivers, events, migrate
from outbox_bridge.jobstore.drivers import Notifier
from outbox_bridge.telemetry.logs import emit

_PENDING = "outbox_bridge.enqueued"  # on a connection's info: what to announce once its transaction commits

# --- the store behind the caller's connection ---------------------------------------------------------------

_checked: weakref.WeakSet[Engine] = weakref.WeakSet()
_checking = threading.Lock()


def check_store(connection: Connection) -> None:
    """`StoreMismatch` unless the connection's database is one the deployment writes to: at the code's
    schema revision, and on SQLite in WAL mode. Checked once per engine, on a connection of its own: the
    caller's transaction must not read before it writes, since on SQLite a deferred transaction that read
    first fails its write at once ("database is locked") when another process committed in between."""
    engine = connection.engine
    if engine in _checked:
        return
    driver = drivers.of(engine)
    with engine.connect().execution_options(**driver.read_options) as own:  # a read: no write lock
        unfit = driver.check(own)
        current = migrate.revision_of(own)
    if unfit is not None:
        raise StoreMismatch(unfit)
    head = migrate.head_revision()
    if current != head:
        raise StoreMismatch(
            f"the store's schema is at {current or 'nothing (not initialised)'}, the code needs {head}: "
            "run `outbox-bridge db upgrade`"
        )
    with _checking:
        if engine not in _checked:
            _listen(engine)
            _checked.add(engine)


def hold_write_lock(connection: Connection) -> None:
    """Before a read the transaction's writes depend on (the states of the jobs a new job waits for): make
    the read and the writes one transaction that no other writer enters in between, so that no job named in
    `after` ends unseen after it was read and before the new job's edges are written. On SQLite, pysqlite
    opens the caller's transaction only at its first write, and a read before it runs outside it: unless
    the transaction is open already, it is opened here holding the write lock (`BEGIN IMMEDIATE`, waiting
    as long as the connection's own timeout says). On PostgreSQL the transaction began with the caller's,
    and the read locks the rows it reads."""
    raw = connection.connection.driver_connection
    if isinstance(raw, sqlite3.Connection) and not raw.in_transaction:
        raw.execute("BEGIN IMMEDIATE")


# --- telling the relays once the caller commits -------------------------------------------------------------


def hold_announcement(connection: Connection) -> None:
    """Move what `intake.accept` noted for the store's own transactions (the outbox row's due time, the
    `accepted` event) aside, to be announced after the caller's commit (`_listen`)."""
    pending = connection.info.setdefault(_PENDING, {"due": math.inf, "events": [], "committed": False})
    due = events.outbox_due(connection)
    if due is not None:
        pending["due"] = min(pending["due"], due)
    pending["events"].extend(events.committed(connection))


def _listen(engine: Engine) -> None:
    notifier = _notifier(engine)

    def committing(conn: Connection) -> None:
        if _PENDING in conn.info:
            conn.info[_PENDING]["committed"] = True

    def rolling_back(conn: Connection) -> None:
        conn.info.pop(_PENDING, None)

    def returned(_dbapi: Any, record: Any) -> None:
        pending = record.info.pop(_PENDING, None)
        if not pending or not pending["committed"]:
            return
        if notifier is not None and pending["due"] < math.inf:
            notifier.notify(pending["due"])
        emit(pending["events"])

    event.listen(engine, "commit", committing)
    event.listen(engine, "rollback", rolling_back)
    event.listen(engine.pool, "checkin", returned)


def _notifier(engine: Engine) -> Notifier | None:
    """What tells the relays after the caller's commit: a SQLite file store's notify sockets; None where
    the database announces new rows itself (PostgreSQL's trigger)."""
    return drivers.of(engine).notifier(engine)

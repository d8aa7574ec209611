"""Engines and transactions, on either database: each engine is made by its database's driver
(`jobstore.drivers`), which also sends the store's named statements (`execute`). Every statement an
engine's connections send, through SQLAlchemy or below it, is seen once before it is sent
(`jobstore.drivers.sending`): it is counted, `transact_one` holds a transaction to one statement, and whoever
watches the engine is told (`watch_statements`).

A write transaction on SQLite first takes its place in the writer queue (`drivers.sqlite.writer_queue`: one
per process, and a file lock beside the database shared by every process on the host), so the writer that
begins normally finds the lock free and the others sleep in the kernel until they reach the head of the
queue. SQLite's busy handler sleeps 1, 2, 5, 10 ms and more between tries, so the driver disables it and
`transact` retries the lock errors that remain (a program that does not queue holds the lock) itself, with
short, jittered, bounded waits; serialization failures and deadlocks on PostgreSQL are retried the same
bounded way.

A SQLite engine only ever uses the file its URL names now (`drivers.sqlite.storefile`): it never creates the
file (only `migrate.init_schema` does), a pooled connection whose file was removed or replaced is opened
again at its next checkout, and a write transaction that committed into a file no longer named runs
again; with no file there, the caller gets `StoreUnavailable`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError

from outbox_bridge.core.backoff import Backoff, Streak
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import drivers, events
from outbox_bridge.jobstore.drivers.sending import (
    SecondStatement,
    Sent,
    StatementWatcher,
    held_to_one,
    sent_through_sqlalchemy,
    statements_seen,
    stats,
    watch_statements,
)
from outbox_bridge.jobstore.errors import Retry
from outbox_bridge.telemetry.instruments import STORE_WRITE_SECONDS
from outbox_bridge.telemetry.logs import JobEvent, emit

P = ParamSpec("P")
T = TypeVar("T")

SLOW_LOCK_WAIT = 0.005
# A busy store's transaction is tried again after 0.2 ms, doubling to 4 ms, until its timeout.
RETRY_PAUSES = Backoff(0.0002, 0.004)


class StoreUnavailable(Exception):
    """The store could not be reached or written within its timeout; nothing was written."""


# What the store's other modules and its callers reach through this module.
__all__ = [
    "Retry",
    "SecondStatement",
    "Sent",
    "StatementWatcher",
    "StoreUnavailable",
    "execute",
    "execute_many",
    "make_engine",
    "read",
    "read_one",
    "sqlite_path",
    "start_stats_writer",
    "statements_seen",
    "stats",
    "transact",
    "transact_one",
    "watch_statements",
]


def start_stats_writer(directory: Path, name: str, interval: float = 0.2) -> None:
    """Every `interval` seconds and at exit, write this process's store counters and CPU time to
    `<directory>/<name>-<pid>.json` (the benchmark reads them)."""
    import atexit
    import json
    import os
    import resource

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{os.getpid()}.json"

    def write() -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        data = {
            **stats.snapshot(),
            "cpu_user": usage.ru_utime,
            "cpu_system": usage.ru_stime,
            "pid": os.getpid(),
            "name": name,
            "at": time.time(),
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)

    def loop() -> None:
        while True:
            time.sleep(interval)
            write()

    atexit.register(write)
    threading.Thread(target=loop, name="stats-writer", daemon=True).start()


def make_engine(settings: Settings, role: str | None = None, **kwargs: Any) -> Engine:
    """An engine for `settings.database_url`, made by its database's driver; nothing is created on disk. On
    a database server its connections are named after `role` (`api`, `relay`...) and this process, so that
    an operator tells them apart (`pg_stat_activity.application_name`), unless the URL names them."""
    url = make_url(settings.database_url)
    options = {"store_lock_timeout": settings.store_lock_timeout_seconds}
    engine = drivers.for_url(url).make_engine(url, settings, options, role=role, **kwargs)
    event.listen(engine, "before_cursor_execute", sent_through_sqlalchemy)
    return engine


def execute(conn: Connection, name: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
    """Run the statement named `name` in the `.sql` files of the driver of `conn`'s database, as written
    (`drivers.sqlfile`), with `params`, in `conn`'s transaction; its rows, as tuples (none for a statement
    that returns none)."""
    return drivers.of(conn).run(conn, name, params or {})


def execute_many(conn: Connection, name: str, rows: Sequence[Mapping[str, Any]]) -> int:
    """`execute` of a statement that returns nothing, once for each of `rows` (one call into the driver);
    the number of rows it changed in all."""
    return drivers.of(conn).run_many(conn, name, rows)


def sqlite_path(settings: Settings) -> Path | None:
    """The file the store lives in, or None (a server, an in-memory database)."""
    url = make_url(settings.database_url)
    return drivers.for_url(url).file(url)


def _is_retryable(exc: DBAPIError) -> bool:
    text = str(exc.orig).lower()
    if "database is locked" in text or "database is busy" in text:
        return True
    sqlstate = getattr(exc.orig, "sqlstate", None)
    return sqlstate in {"40001", "40P01"}


def transact(
    engine: Engine,
    fn: Callable[Concatenate[Connection, P], T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """Run `fn(conn, ...)` in one write transaction and commit it.

    On SQLite the transaction waits in the writer queue first. Lock contention, serialization failures and
    `Retry` roll the transaction back and run it again after a short jittered pause. The queue and retries
    together take at most `store_lock_timeout_seconds`; past that, `StoreUnavailable`.
    """
    return _run(engine, fn, args, kwargs, write=True)


def transact_one(
    engine: Engine,
    fn: Callable[Concatenate[Connection, P], T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """`transact` for a transaction of one statement. On PostgreSQL the statement commits by itself
    (autocommit): one round trip where BEGIN, the statement and COMMIT take three, and on a lightly loaded
    host each round trip also wakes the server and the caller. A second statement is refused before it is
    sent (`SecondStatement`): the first has already committed. A connection lost during the statement is
    not run again, since the statement may have committed (`StoreUnavailable`, as for a COMMIT lost on
    the way). On SQLite, `transact`."""
    return _run(engine, fn, args, kwargs, write=True, one=drivers.of(engine).commits_statement_alone())


def read(
    engine: Engine,
    fn: Callable[Concatenate[Connection, P], T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """Run `fn(conn, ...)` in a read transaction (deferred on SQLite, so it takes no write lock)."""
    return _run(engine, fn, args, kwargs, write=False)


def read_one(
    engine: Engine,
    fn: Callable[Concatenate[Connection, P], T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """`read` for a read of one statement. On PostgreSQL it runs in autocommit: one round trip where BEGIN,
    the statement and COMMIT take three. A second statement is refused before it is sent
    (`SecondStatement`); a connection lost on the way is read again on a new one. On SQLite, `read`."""
    return _run(engine, fn, args, kwargs, write=False, one=drivers.of(engine).commits_statement_alone())


def _run(
    engine: Engine, fn: Callable[..., T], args: Any, kwargs: Any, *, write: bool, one: bool = False
) -> T:
    timeout = float(engine.get_execution_options().get("store_lock_timeout", 5.0))
    started = time.monotonic()
    driver = drivers.of(engine)
    queue = driver.writer_turns(engine) if write else None
    # The pool's checkout and checkin run outside the queue: they keep no other writer waiting (on a cold
    # host, about a sixth of the time a one-row write transaction holds the head of the queue). A
    # connection that cannot be had here is asked for again inside the retries, which decide what its
    # failure means.
    first = _checked_out(engine)
    try:
        # A writer that does not reach the head of the queue in time goes ahead without it: SQLite's lock
        # still decides, and a holder stuck outside its transaction (a stopped process) cannot stall
        # everyone past the timeout.
        took = queue is not None and not queue.held_here() and queue.acquire(timeout)
        writing_since = time.monotonic()
        try:
            result, due, committed, last = _retrying(
                engine, first, fn, args, kwargs, write=write, one=one, started=started, timeout=timeout
            )
        finally:
            if took:
                assert queue is not None
                queue.release()
            if write:
                held = time.monotonic() - writing_since
                stats.add(write_seconds=held)
                STORE_WRITE_SECONDS.observe(held)
    finally:
        if first is not None:
            first.close()  # (again, if an attempt on it failed: closing is idempotent)
    if last is not first:
        last.close()
    if due is not None:  # after leaving the queue: the relay's lease needs it
        driver.announce(engine, due)
    emit(committed)  # after leaving it too: logging is no reason to keep other writers waiting
    return result


def _checked_out(engine: Engine) -> Connection | None:
    try:
        return engine.connect()
    except DBAPIError:
        return None


def _retrying(
    engine: Engine,
    first: Connection | None,
    fn: Callable[..., T],
    args: Any,
    kwargs: Any,
    *,
    write: bool,
    one: bool,
    started: float,
    timeout: float,
) -> tuple[T, float | None, list[JobEvent], Connection]:
    """Attempts of the transaction until one commits (or the timeout): the first on `first`, each later
    one on a connection of its own (the one before may have been lost; a failed attempt's connection is
    given back at once). With the connection it committed on, for the caller to give back after leaving
    the writer queue."""
    pauses = Streak(RETRY_PAUSES)
    conn = first
    while True:
        attempt_started = time.monotonic()
        try:
            if conn is None:
                conn = engine.connect()
            result = _attempt(engine, conn, fn, args, kwargs, write=write, one=one)
        except BaseException as exc:
            if conn is not None:
                conn.close()
            conn = None
            if not isinstance(exc, Retry | DBAPIError):
                raise
            if isinstance(exc, DBAPIError) and not _is_retryable(exc):
                if isinstance(exc, OperationalError):
                    raise StoreUnavailable(str(exc.orig)) from exc
                raise
            waited = time.monotonic() - started
            if waited >= timeout:
                raise StoreUnavailable(f"store busy for {waited:.1f}s") from exc
            stats.add(retries=1)
            time.sleep(pauses.failed())
            continue
        waited = attempt_started - started
        if write:
            stats.add(write_transactions=1, lock_wait_seconds=waited, slow_lock_waits=waited > SLOW_LOCK_WAIT)
        else:
            stats.add(read_transactions=1)
        return (*result, conn)


def _reconnecting(fn: Callable[..., T], conn: Connection, *args: Any, **kwargs: Any) -> T:
    """`fn(conn, ...)`; a connection found lost on the way becomes `Retry`: the transaction had not sent its
    COMMIT, so nothing of it was committed and it runs again on a new connection. (A loss during the COMMIT
    itself is not retried: that transaction may have committed.)"""
    try:
        return fn(conn, *args, **kwargs)
    except DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
        raise Retry(f"the store connection was lost mid-transaction: {exc.orig}") from exc


def _committing_itself(fn: Callable[..., T], conn: Connection, *args: Any, **kwargs: Any) -> T:
    """`fn(conn, ...)` in autocommit, held to one statement (`transact_one`)."""
    try:
        with held_to_one(conn):
            return fn(conn, *args, **kwargs)
    except DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
        raise StoreUnavailable(
            f"the store connection was lost during a statement that commits itself, "
            f"which may have committed: {exc.orig}"
        ) from exc


def _attempt(
    engine: Engine,
    conn: Connection,
    fn: Callable[..., T],
    args: Any,
    kwargs: Any,
    *,
    write: bool,
    one: bool = False,
) -> tuple[T, float | None, list[JobEvent]]:
    """One run of the transaction on `conn`; with the earliest due time of the outbox rows it added (if
    any) and the job events it noted (`jobstore.events`)."""
    if not write:
        if one:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            with held_to_one(conn):
                return _reconnecting(fn, conn, *args, **kwargs), None, []
        options = drivers.of(engine).read_options
        if options:
            conn = conn.execution_options(**options)
        with conn.begin():
            return _reconnecting(fn, conn, *args, **kwargs), None, []
    events.forget(conn)
    if one:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        result = _committing_itself(fn, conn, *args, **kwargs)
    else:
        with conn.begin():
            result = _reconnecting(fn, conn, *args, **kwargs)
    if not drivers.of(engine).still_in_place(engine, conn):  # what it wrote is not in the store: run it again
        conn.invalidate()
        raise Retry("the store's file was removed or replaced while a transaction committed to it")
    return result, events.outbox_due(conn), events.committed(conn)

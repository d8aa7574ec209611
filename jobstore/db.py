"""Engines and transactions, on either database: each engine is made by its database's driver
(`jobstore.drivers`), which also sends the statements run below SQLAlchemy (`direct`). Every statement an
engine's connections send, through SQLAlchemy or below it, is seen once before it is sent, by the store's
own observer: it counts it, holds `transact_one` to one statement, and tells whoever watches the engine
(`watch_statements`).

A write transaction on SQLite first takes its place in the writer queue (`jobstore.writer_queue`: one per
process, and a file lock beside the database shared by every process on the host), so the writer that
begins normally finds the lock free and the others sleep in the kernel until they reach the head of the
queue. SQLite's busy handler sleeps 1, 2, 5, 10 ms and more between tries, so the driver disables it and
`transact` retries the lock errors that remain (a program that does not queue holds the lock) itself, with
short, jittered, bounded waits; serialization failures and deadlocks on PostgreSQL are retried the same
bounded way.

A SQLite engine only ever uses the file its URL names now (`jobstore.storefile`): it never creates the
file (only `migrate.init_schema` does), a pooled connection whose file was removed or replaced is opened
again at its next checkout, and a write transaction that committed into a file no longer named runs
again; with no file there, the caller gets `StoreUnavailable`.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Concatenate, NamedTuple, ParamSpec, TypeVar

import psycopg
from sqlalchemy import ClauseElement, Connection, Engine, event
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.dialects.sqlite.base import SQLiteCompiler
from sqlalchemy.dialects.sqlite.pysqlite import dialect as pysqlite_dialect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.sql.compiler import SQLCompiler

from outbox_bridge.core.backoff import Backoff, Streak
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import drivers, events, host_notify, storefile
from outbox_bridge.jobstore.drivers.sqlfile import Statement
from outbox_bridge.jobstore.writer_queue import WriterQueue
from outbox_bridge.telemetry.instruments import STORE_WRITE_SECONDS
from outbox_bridge.telemetry.logs import JobEvent, emit

P = ParamSpec("P")
T = TypeVar("T")

SLOW_LOCK_WAIT = 0.005
# A busy store's transaction is tried again after 0.2 ms, doubling to 4 ms, until its timeout.
RETRY_PAUSES = Backoff(0.0002, 0.004)


class StoreUnavailable(Exception):
    """The store could not be reached or written within its timeout; nothing was written."""


class Retry(Exception):
    """Raised inside a transaction to roll it back and run it again (e.g. a lost insert race)."""


class SecondStatement(Exception):
    """A transaction run by `transact_one` tried a second statement; it was refused before it ran."""


# The connections `transact_one` runs on, with how many statements each has sent.
_held_to_one: weakref.WeakKeyDictionary[Connection, int] = weakref.WeakKeyDictionary()


@dataclass
class StoreStats:
    """Process-wide counters, written to STATS_DIR for the benchmark (`start_stats_writer`)."""

    write_transactions: int = 0
    read_transactions: int = 0
    statements: int = 0
    retries: int = 0
    slow_lock_waits: int = 0
    lock_wait_seconds: float = 0.0
    # Seconds from a writer reaching the head of the writer queue (or, without one, its first try) to the
    # end of its transaction: the time it kept every other writer of the store waiting.
    write_seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **deltas: float) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


stats = StoreStats()


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
    event.listen(engine, "before_cursor_execute", _sent_through_sqlalchemy)
    return engine


@dataclass(frozen=True)
class Direct:
    """A statement compiled once to the driver's own SQL (`%(name)s` placeholders for psycopg, `:name` for
    sqlite3), with the values of the literals it holds; `direct` runs it. On PostgreSQL a `prepared` one
    is parsed and planned once per connection: only for a statement that has one good plan whatever its
    parameters (after five runs PostgreSQL may keep a generic plan, and one that walks a state index instead
    of the ids given costs in proportion to the backlog: `docs/scaling.md`). The others are planned at every
    run, for their parameters. sqlite3 keeps every statement it ran prepared in its connection's cache."""

    sql: str
    defaults: dict[str, Any]
    prepared: bool = False

    @classmethod
    def of(
        cls,
        statement: ClauseElement,
        *,
        prepared: bool = False,
        expanding: Mapping[str, int] | None = None,
        dialect: str = "postgresql",
    ) -> Direct:
        """`statement` (Core or `text`) for `dialect` ("postgresql" or "sqlite"). Its bound parameters are
        passed by name to `direct`; an expanding `IN` parameter only by its count of values (`expanding`,
        a statement per count), its values as `expanded` names them."""
        compiled = statement.compile(dialect=_DIRECT_DIALECTS[dialect]())
        if not expanding:
            return cls(str(compiled), dict(compiled.params), prepared)
        assert isinstance(compiled, SQLCompiler)
        values = dict(compiled.params)  # the literals' values, and None for those given at each run
        state = compiled.construct_expanded_state(
            values | {name: [_placeholder(compiled, name)] * n for name, n in expanding.items()}
        )
        return cls(state.statement, dict(state.parameters), prepared)


def _placeholder(compiled: SQLCompiler, name: str) -> Any:
    """A value for one element of the expanding parameter `name`: a tuple of as many for a tuple `IN`."""
    type_ = compiled.binds[name].type
    return (None,) * len(getattr(type_, "types", ())) if getattr(type_, "_is_tuple_type", False) else None


class HintedSQLiteCompiler(SQLiteCompiler):
    """SQLAlchemy's SQLite compiler leaves a statement's table hints out; this one writes each after its
    table's name, where SQLite reads `INDEXED BY <index>` and `NOT INDEXED` (`jobstore.drivers.sqlite` says
    why the hot statements name their index)."""

    def get_from_hint_text(self, table: Any, text: str | None) -> str | None:
        return text


def _direct_sqlite() -> Any:
    dialect = pysqlite_dialect(paramstyle="named", dbapi=sqlite3)
    dialect.statement_compiler = HintedSQLiteCompiler
    return dialect


_DIRECT_DIALECTS: dict[str, Callable[[], Any]] = {
    "postgresql": psycopg_dialect,
    "sqlite": _direct_sqlite,
}


def expanded(name: str, values: Sequence[Any]) -> dict[str, Any]:
    """The parameters of an expanding `IN` parameter `name` holding `values` (`Direct.of(expanding=...)`),
    each a value or, for a tuple `IN`, a tuple of values."""
    named: dict[str, Any] = {}
    for i, value in enumerate(values, start=1):
        if isinstance(value, tuple):
            named.update((f"{name}_{i}_{j}", part) for j, part in enumerate(value, start=1))
        else:
            named[f"{name}_{i}"] = value
    return named


def direct(
    conn: Connection, statement: Direct | Statement, params: Mapping[str, Any]
) -> list[tuple[Any, ...]]:
    """Run `statement` on `conn`'s driver connection, in its transaction, below SQLAlchemy's execution
    layer; its rows, as tuples (none for a statement that returns none). For the statements of the path
    every job takes, where SQLAlchemy's layer costs more client CPU than the statement, at the head of the
    writer queue (`docs/scaling.md` has the figures). Its errors are SQLAlchemy's, as `conn.execute` raises
    them, and a lost connection is invalidated, so `transact` treats both alike."""
    driver = conn.connection.driver_connection
    values = {**statement.defaults, **params} if statement.defaults else params
    _sending(conn, statement.sql, values, many=False)
    with _raised_as_sqlalchemy_would(conn, statement.sql, values):
        return drivers.of(conn).execute(driver, statement.sql, values, prepared=statement.prepared)


def execute(conn: Connection, name: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
    """Run the statement named `name` in the `.sql` files of the driver of `conn`'s database, as written
    (`drivers.sqlfile`), with `params`; its rows, as tuples (none for a statement that returns none)."""
    return direct(conn, drivers.of(conn).statement(name), params or {})


def execute_many(conn: Connection, name: str, rows: Sequence[Mapping[str, Any]]) -> int:
    """`execute` of a statement that returns nothing, once for each of `rows` (one call into the driver);
    the number of rows it changed in all."""
    return direct_many(conn, drivers.of(conn).statement(name), rows)


def run(conn: Connection, statement: ClauseElement, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """`direct` of `statement` (Core or `text`), compiled once for the database `conn` is connected to, as
    its driver adapts it (`Driver.adapted`)."""
    return direct(conn, _compiled(statement, conn.dialect.name), params)


@functools.lru_cache(maxsize=256)
def _compiled(statement: ClauseElement, dialect: str) -> Direct:
    return Direct.of(drivers.named(dialect).adapted(statement), dialect=dialect)


def direct_in(
    conn: Connection,
    statement: ClauseElement,
    params: Mapping[str, Any],
    name: str,
    values: Sequence[Any],
    *,
    prepared: bool = False,
    firsts: str | None = None,
) -> list[tuple[Any, ...]]:
    """`direct` of `statement` (Core) with its expanding `IN` parameter `name` holding `values`: compiled
    once per dialect and size of list (`padded_count`; the list is filled up to it with its last value,
    which an `IN` reads as it read it once), and on PostgreSQL prepared on the server when `prepared`.
    With `firsts`, `values` are tuples and the statement's expanding parameter of that name holds the
    first element of each (a tuple `IN` that SQLite cannot look up in an index beside a plain one it can)."""
    count = padded_count(len(values))
    compiled = _compiled_in(statement, conn.dialect.name, name, count, prepared, firsts)
    filled = [*values, *[values[-1]] * (count - len(values))] if count > len(values) else values
    named = {**params, **expanded(name, filled)}
    if firsts is not None:
        named |= expanded(firsts, [value[0] for value in filled])
    return direct(conn, compiled, named)


def padded_count(count: int) -> int:
    """The size of list a statement with `count` values in an expanding `IN` is compiled for: `count` up to
    8, then rounded up to a quarter of its power of two (9-16 in steps of 2, 17-32 in steps of 4, ...), so
    at most a fifth of the values repeat. Each size is a statement of its own for SQLAlchemy to compile
    (which costs far more than running it: in a burst, new sizes kept a consumer compiling) and for the
    driver to prepare; rounded, a statement has four sizes per doubling."""
    if count <= 8:
        return count
    step = 1 << ((count - 1).bit_length() - 3)
    return -(-count // step) * step


@functools.lru_cache(maxsize=1024)
def _compiled_in(
    statement: ClauseElement, dialect: str, name: str, count: int, prepared: bool, firsts: str | None = None
) -> Direct:
    expanding = {name: count} if firsts is None else {name: count, firsts: count}
    adapted = drivers.named(dialect).adapted(statement)
    return Direct.of(adapted, prepared=prepared, expanding=expanding, dialect=dialect)


def run_many(conn: Connection, statement: ClauseElement, rows: Sequence[Mapping[str, Any]]) -> int:
    """`direct_many` of `statement` (Core), compiled once for the database `conn` is connected to."""
    return direct_many(conn, _compiled(statement, conn.dialect.name), rows)


def direct_many(conn: Connection, statement: Direct | Statement, rows: Sequence[Mapping[str, Any]]) -> int:
    """`direct` of a statement that returns nothing, once for each of `rows` (one call into the driver);
    the number of rows it changed in all."""
    driver = conn.connection.driver_connection
    values = [{**statement.defaults, **row} for row in rows] if statement.defaults else rows
    _sending(conn, statement.sql, values, many=True)
    with _raised_as_sqlalchemy_would(conn, statement.sql, values):
        cursor = driver.cursor()  # type: ignore[union-attr]
        cursor.executemany(statement.sql, values)
        return int(cursor.rowcount)


@contextmanager
def _raised_as_sqlalchemy_would(conn: Connection, sql: str, values: Any) -> Iterator[None]:
    """The database driver's errors in the block raised as SQLAlchemy raises them for `conn.execute`: its
    `DBAPIError` family (`OperationalError`, `IntegrityError`, ...), carrying the statement and the
    driver's own error; a lost PostgreSQL connection is invalidated (`transact` then runs the transaction
    again on a new one). Every store function runs on a SQLAlchemy `Connection`, often the caller's own
    (`outbox_bridge.enqueue(conn, ...)`), so its callers and `transact`'s retries see one family of errors
    whichever way a statement was sent."""
    try:
        yield
    except sqlite3.Error as exc:
        raise DBAPIError.instance(sql, values, exc, sqlite3.Error, dialect=conn.dialect) from exc
    except psycopg.Error as exc:
        driver = conn.connection.driver_connection
        lost = conn.dialect.is_disconnect(exc, driver, None)  # type: ignore[arg-type]
        if lost:
            conn.invalidate(exc)
        raise DBAPIError.instance(
            sql, values, exc, psycopg.Error, connection_invalidated=lost, dialect=conn.dialect
        ) from exc


def begin_directly(conn: Connection, sql: str) -> None:
    """Send `sql` (a BEGIN) on `conn`'s driver connection, below SQLAlchemy's execution layer, which would
    double what a BEGIN costs at the head of the writer queue; its errors are SQLAlchemy's all the same, so
    `transact` retries a busy lock."""
    _sending(conn, sql, (), many=False)
    with _raised_as_sqlalchemy_would(conn, sql, ()):
        conn.connection.driver_connection.execute(sql)  # type: ignore[union-attr]


# --- the statements an engine sends -----------------------------------------------------------------------
#
# Each statement a store engine's connections send is seen once, before it is sent, by `_sending`: those
# SQLAlchemy executes through the one `before_cursor_execute` listener `make_engine` installs, those sent
# below SQLAlchemy (`direct`, `direct_many`, `begin_directly`) by a call of their own.


class Sent(NamedTuple):
    """A statement as it is sent: its SQL as the database driver receives it, and its parameters (with
    `many`, a sequence of parameter sets, the statement run once for each)."""

    sql: str
    parameters: Any
    many: bool


StatementWatcher = Callable[[Connection, Sent], None]

_watchers: weakref.WeakKeyDictionary[Engine, tuple[StatementWatcher, ...]] = weakref.WeakKeyDictionary()
_watchers_lock = threading.Lock()


def watch_statements(engine: Engine, watcher: StatementWatcher) -> Callable[[], None]:
    """Call `watcher(conn, sent)` for each statement sent on a connection of `engine` (made by
    `make_engine`) from now on, whichever way it is sent, through SQLAlchemy or below it (`direct`): once,
    before it is sent, in the sending thread; what it raises stops the statement. Returns what stops
    watching."""
    with _watchers_lock:
        _watchers[engine] = (*_watchers.get(engine, ()), watcher)

    def stop() -> None:
        with _watchers_lock:
            left = tuple(w for w in _watchers.get(engine, ()) if w is not watcher)
            if left:
                _watchers[engine] = left
            else:
                _watchers.pop(engine, None)

    return stop


@contextmanager
def statements_seen(engine: Engine) -> Iterator[list[Sent]]:
    """Every statement sent on `engine`'s connections within the block, in the order sent
    (`watch_statements`)."""
    seen: list[Sent] = []
    stop = watch_statements(engine, lambda _conn, sent: seen.append(sent))
    try:
        yield seen
    finally:
        stop()


def _sending(conn: Connection, sql: str, parameters: Any, *, many: bool) -> None:
    """`conn` is about to send `sql`: count it (refused where `transact_one` allows no second statement),
    then tell the engine's watchers."""
    _count_statement(conn)
    if _watchers:
        watchers = _watchers.get(conn.engine)
        if watchers:
            sent = Sent(sql, parameters, many)
            for watcher in watchers:
                watcher(conn, sent)


def _sent_through_sqlalchemy(
    conn: Connection, _cursor: Any, statement: str, parameters: Any, _context: Any, executemany: bool
) -> None:
    """`_sending` of a statement SQLAlchemy executes (its `before_cursor_execute` event)."""
    _sending(conn, statement, parameters, many=executemany)


def _count_statement(conn: Connection) -> None:
    """Count a statement `conn` sends; refuse it (`SecondStatement`) where `transact_one` holds the
    transaction to one and one was sent already."""
    stats.add(statements=1)
    sent = _held_to_one.get(conn)
    if sent is not None:
        if sent:
            raise SecondStatement("a second statement in a transaction run by transact_one")
        _held_to_one[conn] = 1


# The writer queue of each SQLite file engine, and what notifies its relays after a commit that added outbox
# rows (neither for PostgreSQL or an in-memory database).
_writer_queues: weakref.WeakKeyDictionary[Engine, WriterQueue] = weakref.WeakKeyDictionary()
_notifiers: weakref.WeakKeyDictionary[Engine, host_notify.Notifier] = weakref.WeakKeyDictionary()


def queue_writers(engine: Engine, queue: WriterQueue) -> None:
    """Every write transaction of `engine` waits in `queue` first."""
    _writer_queues[engine] = queue


def notify_after_commits(engine: Engine, notifier: host_notify.Notifier) -> None:
    """After every write transaction of `engine` that added outbox rows, `notifier` notifies the relays."""
    _notifiers[engine] = notifier


def writer_queue_path(database: Path) -> Path:
    """The file the writers on one host queue on, beside the database."""
    # `-write-turn`, the name it had before it was called the writer queue: processes running the earlier
    # code lock the same file, so every writer on the host still waits in one queue.
    return database.with_name(f"{database.name}-write-turn")


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
    queue = _writer_queues.get(engine) if write else None
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
    notifier = _notifiers.get(engine)
    if due is not None and notifier is not None:  # after leaving the queue: the relay's lease needs it
        notifier.notify(due)
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
        with _one_statement(conn):
            return fn(conn, *args, **kwargs)
    except DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
        raise StoreUnavailable(
            f"the store connection was lost during a statement that commits itself, "
            f"which may have committed: {exc.orig}"
        ) from exc


@contextmanager
def _one_statement(conn: Connection) -> Iterator[None]:
    """`conn` sends at most one statement in the block (`SecondStatement` refuses a second)."""
    _held_to_one[conn] = 0
    try:
        yield
    finally:
        del _held_to_one[conn]


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
            with _one_statement(conn):
                return _reconnecting(fn, conn, *args, **kwargs), None, []
        options = drivers.of(engine).read_options
        if options:
            conn = conn.execution_options(**options)
        with conn.begin():
            return _reconnecting(fn, conn, *args, **kwargs), None, []
    host_notify.forget(conn)
    events.forget(conn)
    if one:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        result = _committing_itself(fn, conn, *args, **kwargs)
    else:
        with conn.begin():
            result = _reconnecting(fn, conn, *args, **kwargs)
    if not storefile.still_named(engine, conn):  # what it wrote is not in the store: run it again
        conn.invalidate()
        raise Retry("the store's file was removed or replaced while a transaction committed to it")
    return result, host_notify.noted(conn), events.committed(conn)

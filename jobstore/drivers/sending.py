"""What the store's connections send: every statement, through SQLAlchemy or below it (`Driver.run`), is
seen once before it is sent (`sending`). It is counted (`stats`), refused where a transaction is held to one
statement (`held_to_one`, for `db.transact_one`), and shown to whoever watches the engine
(`watch_statements`). Nothing here depends on the database: both drivers and `jobstore.db` use it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sqlalchemy import Connection, Engine


class SecondStatement(Exception):
    """A transaction run by `transact_one` tried a second statement; it was refused before it ran."""


# The connections a transaction held to one statement runs on, with how many statements each has sent.
_held_to_one: weakref.WeakKeyDictionary[Connection, int] = weakref.WeakKeyDictionary()


@contextmanager
def held_to_one(conn: Connection) -> Iterator[None]:
    """`conn` sends at most one statement in the block (`SecondStatement` refuses a second)."""
    _held_to_one[conn] = 0
    try:
        yield
    finally:
        del _held_to_one[conn]


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
    `db.make_engine`) from now on, whichever way it is sent, through SQLAlchemy or below it (`Driver.run`):
    once, before it is sent, in the sending thread; what it raises stops the statement. Returns what stops
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


def sending(conn: Connection, sql: str, parameters: Any, *, many: bool) -> None:
    """`conn` is about to send `sql`: count it (refused where `held_to_one` allows no second statement),
    then tell the engine's watchers."""
    _count_statement(conn)
    if _watchers:
        watchers = _watchers.get(conn.engine)
        if watchers:
            sent = Sent(sql, parameters, many)
            for watcher in watchers:
                watcher(conn, sent)


def sent_through_sqlalchemy(
    conn: Connection, _cursor: Any, statement: str, parameters: Any, _context: Any, executemany: bool
) -> None:
    """`sending` of a statement SQLAlchemy executes (its `before_cursor_execute` event)."""
    sending(conn, statement, parameters, many=executemany)


def _count_statement(conn: Connection) -> None:
    """Count a statement `conn` sends; refuse it (`SecondStatement`) where `held_to_one` holds the
    transaction to one and one was sent already."""
    stats.add(statements=1)
    sent = _held_to_one.get(conn)
    if sent is not None:
        if sent:
            raise SecondStatement("a second statement in a transaction held to one")
        _held_to_one[conn] = 1

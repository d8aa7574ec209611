"""Pausing a deployment's processes (SIGSTOP) without freezing one inside its write transaction.

A process stopped while it heads SQLite's writer queue or holds its lock (a relay writing its marks, a
consumer's round, a heartbeat) keeps them until it is resumed: every other writer, the api among them, waits
for it, and a phase that measures the api alone would measure that wait. So `paused` stops the processes,
checks that the store could be written by someone else (the writer queue's file and SQLite's lock both
free), and when it could not, resumes them, waits a moment and tries again. PostgreSQL has no store-wide
write lock, so there the first stop stands.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.drivers.sqlite import writer_queue_path
from outbox_bridge.launch.stack import Service

TRIES = 40
RETRY_SECONDS = 0.05
STOP_WAIT_SECONDS = 2.0  # SIGSTOP is delivered asynchronously: how long to wait for each to be stopped
LOCK_PROBE_SECONDS = 0.02


@contextlib.contextmanager
def paused(processes: Sequence[Service], settings: Settings) -> Iterator[int]:
    """Stop `processes` at a moment none of them heads the store's writer queue or holds its lock, for the
    block; resume them afterwards, whatever happens. Yields how many tries it took (TRIES + 1 when no try
    found the store free: the processes are stopped all the same)."""
    path = db.sqlite_path(settings)
    tries = 0
    try:
        while True:
            tries += 1
            _stop(processes)
            if path is None or writable(path):
                break
            if tries > TRIES:
                break
            _resume(processes)
            time.sleep(RETRY_SECONDS)
        yield tries
    finally:
        _resume(processes)


def writable(database: Path) -> bool:
    """Whether a writer could begin on `database` now: nobody heads its writer queue
    (`drivers.sqlite.writer_queue`) or holds SQLite's write lock."""
    fd = os.open(writer_queue_path(database), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    conn = sqlite3.connect(database, timeout=LOCK_PROBE_SECONDS, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:  # "database is locked"
        return False
    finally:
        conn.close()


def _stop(processes: Sequence[Service]) -> None:
    for process in processes:
        process.signal(signal.SIGSTOP)
    deadline = time.monotonic() + STOP_WAIT_SECONDS
    waiting = [p for p in processes if p.alive()]
    while waiting and time.monotonic() < deadline:
        waiting = [p for p in waiting if p.alive() and not _stopped(p.pid)]
        if waiting:
            time.sleep(0.001)


def _resume(processes: Iterable[Service]) -> None:
    for process in processes:
        process.signal(signal.SIGCONT)


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # The state follows the command's closing parenthesis: "pid (comm) S ...".
            return stat.read().rpartition(")")[2].split()[0] in {"T", "t"}
    except (OSError, IndexError):
        return True  # gone, or no /proc to ask: nothing to wait for

"""The writer queue (jobstore/drivers/sqlite/writer_queue.py) on a real SQLite file: writers of several
processes wait in
the queue instead of retrying SQLite's lock, a transaction still holds SQLite's lock from its BEGIN against
writers that do not queue, and a head of the queue that never leaves it delays a writer by at most the lock
timeout."""

from __future__ import annotations

import multiprocessing
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, func, select

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, migrate
from outbox_bridge.jobstore.drivers.sqlite import writer_queue_path
from outbox_bridge.jobstore.drivers.sqlite.writer_queue import WriterQueue
from outbox_bridge.jobstore.schema import jobs
from tests.conftest import make_settings
from tests.support.store import add_job

# The writer queue exists for SQLite's single write lock: these tests run on SQLite only.
pytestmark = pytest.mark.databases("sqlite")

WAIT = 30.0  # bound on every wait for another process or thread
WRITERS, WRITES = 3, 40


def count_jobs(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(jobs)).scalar_one())


def write_many(settings: Settings, name: str, results: Any) -> None:
    """One writer process: `WRITES` transactions, then its store counters."""
    engine = db.make_engine(settings)
    try:
        for i in range(WRITES):
            db.transact(engine, add_job, f"{name}-{i}")
        results.put(db.stats.snapshot())
    finally:
        engine.dispose()


@pytest.fixture
def store_settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, store_lock_timeout_seconds=WAIT)


@pytest.fixture
def sqlite_engine(store_settings: Settings) -> Iterator[Engine]:
    engine = db.make_engine(store_settings)
    migrate.init_schema(store_settings, engine)
    yield engine
    engine.dispose()


def test_writers_of_several_processes_wait_in_the_queue_and_never_retry(
    store_settings: Settings, sqlite_engine: Engine
) -> None:
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    writers = [
        ctx.Process(target=write_many, args=(store_settings, f"p{n}", results)) for n in range(WRITERS)
    ]
    for writer in writers:
        writer.start()
    try:
        counters = [results.get(timeout=WAIT) for _ in writers]
    finally:
        for writer in writers:
            writer.join(WAIT)
            if writer.is_alive():
                writer.kill()
    assert [w.exitcode for w in writers] == [0] * WRITERS
    assert sum(c["write_transactions"] for c in counters) == WRITERS * WRITES
    assert sum(c["retries"] for c in counters) == 0, "a writer found SQLite's lock taken and retried"
    assert db.read(sqlite_engine, count_jobs) == WRITERS * WRITES


def test_a_transaction_holds_sqlites_lock_from_its_begin_against_a_writer_that_does_not_queue(
    store_settings: Settings, sqlite_engine: Engine
) -> None:
    entered, release = threading.Event(), threading.Event()

    def hold(conn: Connection) -> None:
        entered.set()
        assert release.wait(WAIT)

    holder = threading.Thread(target=db.transact, args=(sqlite_engine, hold))
    holder.start()
    try:
        assert entered.wait(WAIT)
        database = db.sqlite_path(store_settings)
        outsider = sqlite3.connect(str(database), isolation_level=None, timeout=0)
        try:
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                outsider.execute("BEGIN IMMEDIATE")
        finally:
            outsider.close()
    finally:
        release.set()
        holder.join(WAIT)


QUEUE_HEAD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
"""


def test_a_head_that_never_leaves_the_queue_delays_a_writer_by_at_most_the_lock_timeout(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, store_lock_timeout_seconds=0.5)
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    database = db.sqlite_path(settings)
    assert database is not None
    with subprocess.Popen(
        [sys.executable, "-c", QUEUE_HEAD, str(writer_queue_path(database))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdin is not None and holder.stdout is not None
        try:
            assert holder.stdout.readline() == "held\n"
            started = time.monotonic()
            db.transact(engine, add_job, "behind-a-stuck-head")
            waited = time.monotonic() - started
        finally:
            holder.stdin.close()
            holder.wait(WAIT)
    assert 0.5 <= waited < 3.0, "the writer went ahead without the queue once the timeout ran out"
    assert db.read(engine, count_jobs) == 1
    engine.dispose()


def test_a_place_given_up_by_a_waiter_is_not_kept_from_the_next_one(tmp_path: Path) -> None:
    path = tmp_path / "queue"
    holder, waiter = WriterQueue(path, timeout=5.0), WriterQueue(path, timeout=5.0)
    assert holder.acquire(1.0)
    assert not waiter.acquire(0.1), "the head of the queue was held elsewhere"
    holder.release()
    # The waiter's helper may take the file lock for the abandoned request: it must give it straight back.
    assert waiter.acquire(5.0)
    waiter.release()
    assert holder.acquire(5.0)
    holder.release()

"""Two processes on one SQLite file: a write transaction from `db.transact` holds the write lock from its
BEGIN (a real BEGIN IMMEDIATE), so a second writer's body cannot start until the first commits, while a
reader goes ahead at once. Also the connection pragmas every engine sets."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time
from collections.abc import Iterator
from multiprocessing.synchronize import Event
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, func, select

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, migrate
from outbox_bridge.jobstore.schema import jobs
from tests.conftest import sqlite_settings
from tests.support.store import add_job

# What this file shows is about SQLite itself (or runs its own stores): once, on SQLite.
pytestmark = pytest.mark.databases("sqlite")

HOLD = 0.6  # how long the other process keeps its transaction open once the test is ready
WAIT = 30.0  # bound on every wait for the other process


def count_jobs(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(jobs)).scalar_one())


def hold_transaction(settings: Settings, write: bool, entered: Event, release: Event) -> None:
    """Process A: open a `db.transact` (or a `db.read`), say so, and do nothing until told; then a write
    transaction accepts one job and commits."""
    engine = db.make_engine(settings)

    def body(conn: Connection) -> None:
        entered.set()
        if not release.wait(WAIT):
            raise TimeoutError("never released")
        if write:
            add_job(conn, "from-process-a")

    try:
        (db.transact if write else db.read)(engine, body)
    finally:
        engine.dispose()


@pytest.fixture
def store_settings(tmp_path: Path) -> Settings:
    return sqlite_settings(tmp_path, store_lock_timeout_seconds=WAIT)


@pytest.fixture
def sqlite_engine(store_settings: Settings) -> Iterator[Engine]:
    engine = db.make_engine(store_settings)
    migrate.init_schema(store_settings, engine)
    yield engine
    engine.dispose()


class OtherProcess:
    """Process A, holding a transaction open on the same file until `let_go`."""

    def __init__(self, settings: Settings, *, write: bool) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.entered, self.release = ctx.Event(), ctx.Event()
        self.process = ctx.Process(
            target=hold_transaction, args=(settings, write, self.entered, self.release)
        )

    def __enter__(self) -> OtherProcess:
        self.process.start()
        assert self.entered.wait(WAIT), "process A never opened its transaction"
        return self

    def let_go_in(self, seconds: float) -> threading.Timer:
        timer = threading.Timer(seconds, self.release.set)
        timer.start()
        return timer

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.process.join(WAIT)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(WAIT)
        assert self.process.exitcode == 0, f"process A exited with {self.process.exitcode}"


def test_a_second_writer_cannot_start_its_body_until_the_first_commits(
    store_settings: Settings, sqlite_engine: Engine
) -> None:
    with OtherProcess(store_settings, write=True) as other:
        # Process A has run BEGIN and nothing else: with a deferred BEGIN it would hold no lock at all.
        waited_before = db.stats.snapshot()["lock_wait_seconds"]
        bodies_started: list[float] = []

        def second_writer(conn: Connection) -> int:
            bodies_started.append(time.monotonic())
            seen = count_jobs(conn)
            add_job(conn, "from-process-b")
            return seen

        released_at = time.monotonic() + HOLD
        timer = other.let_go_in(HOLD)
        try:
            seen_by_b = db.transact(sqlite_engine, second_writer)
        finally:
            timer.cancel()
    assert len(bodies_started) == 1, "the body ran while the other process held the lock"
    assert bodies_started[0] >= released_at
    assert seen_by_b == 1, "B's body started only after A committed, so it sees A's job"
    # B waited for A's lock (in the writer queue, see jobstore/drivers/sqlite/writer_queue.py, rather than
    # retrying).
    assert db.stats.snapshot()["lock_wait_seconds"] - waited_before >= HOLD / 2
    assert db.read(sqlite_engine, count_jobs) == 2


def try_begin_immediate(database: Path) -> str:
    """Ask SQLite itself for the write lock, from a connection that does not queue and does not wait."""
    probe = sqlite3.connect(database, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return "free"
    except sqlite3.OperationalError as exc:
        return str(exc)
    finally:
        probe.close()


def test_the_write_lock_is_taken_at_begin_before_the_transaction_writes_anything(
    store_settings: Settings, sqlite_engine: Engine
) -> None:
    database = db.sqlite_path(store_settings)
    assert database is not None
    with OtherProcess(store_settings, write=True):
        # Process A has only run BEGIN: SQLite already counts it as the writer.
        assert try_begin_immediate(database) == "database is locked"
        assert db.read(sqlite_engine, count_jobs) == 0
    assert try_begin_immediate(database) == "free"


def test_a_read_transaction_takes_no_write_lock(store_settings: Settings, sqlite_engine: Engine) -> None:
    database = db.sqlite_path(store_settings)
    assert database is not None
    with OtherProcess(store_settings, write=False):
        assert try_begin_immediate(database) == "free"


def test_a_reader_proceeds_at_once_while_another_process_holds_a_write_transaction(
    store_settings: Settings, sqlite_engine: Engine
) -> None:
    with OtherProcess(store_settings, write=True):
        retries_before = db.stats.snapshot()["retries"]
        seen = db.read(sqlite_engine, count_jobs)
        assert db.stats.snapshot()["retries"] == retries_before, "the reader waited for a lock"
    assert seen == 0
    assert db.read(sqlite_engine, count_jobs) == 1


def test_a_read_transaction_held_open_elsewhere_does_not_block_a_writer(
    store_settings: Settings, sqlite_engine: Engine
) -> None:
    with OtherProcess(store_settings, write=False):
        retries_before = db.stats.snapshot()["retries"]
        db.transact(sqlite_engine, add_job, "while-a-reads")
        assert db.stats.snapshot()["retries"] == retries_before, "the writer waited for a lock"
    assert db.read(sqlite_engine, count_jobs) == 1


def pragmas(conn: Connection) -> dict[str, object]:
    names = ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
    return {name: conn.exec_driver_sql(f"PRAGMA {name}").scalar() for name in names}


def test_every_connection_is_wal_with_full_sync_foreign_keys_and_no_busy_handler(
    store_settings: Settings, sqlite_engine: Engine
) -> None:
    assert store_settings.sqlite_synchronous == "FULL"
    expected = {"journal_mode": "wal", "synchronous": 2, "foreign_keys": 1, "busy_timeout": 0}
    assert db.transact(sqlite_engine, pragmas) == expected
    assert db.read(sqlite_engine, pragmas) == expected


def test_sqlite_synchronous_normal_is_an_opt_in_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SQLITE_SYNCHRONOUS", "NORMAL")
    settings = sqlite_settings(tmp_path)
    engine = db.make_engine(settings)
    try:
        migrate.init_schema(settings, engine)
        assert settings.sqlite_synchronous == "NORMAL"
        assert db.transact(engine, pragmas) == {
            "journal_mode": "wal",
            "synchronous": 1,
            "foreign_keys": 1,
            "busy_timeout": 0,
        }
    finally:
        engine.dispose()

"""`StoreUnavailable`, and never a half-written job, when the SQLite store cannot be written: its directory
is missing, its file is read-only, or another process holds the write lock past the lock timeout. And a
running engine writes only to the file its path names now: not to one removed or replaced under it, and it
never creates a new one."""

from __future__ import annotations

import os
import select as io_select
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, func, select

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, intake, migrate, queries
from outbox_bridge.jobstore.db import StoreUnavailable
from outbox_bridge.jobstore.schema import jobs, outbox
from tests.conftest import make_settings, sqlite_settings
from tests.support.store import accept

# What this file shows is about SQLite itself: once, on SQLite.
pytestmark = pytest.mark.databases("sqlite")

NOBODY = 65534
WAIT = 30.0  # bound on every wait for the other process

# Another program (an operator's sqlite3 shell, say) that takes the write lock and keeps it until told.
LOCK_HOLDER = """
import sqlite3, sys

conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""


def counts(conn: Connection) -> tuple[int, int]:
    return tuple(  # type: ignore[return-value]
        int(conn.execute(select(func.count()).select_from(t)).scalar_one()) for t in (jobs, outbox)
    )


@contextmanager
def file_modes_enforced() -> Iterator[None]:
    """Root ignores file modes; act as an ordinary user for the block so a read-only file is read-only."""
    if os.geteuid() != 0:
        yield
        return
    os.setegid(NOBODY)
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory any user may enter and write (the test's own tmp_path is private to its owner)."""
    path = Path(tempfile.mkdtemp(prefix="store-unavailable-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_missing_database_directory_is_store_unavailable_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    settings = make_settings(tmp_path, database_url=f"sqlite:///{missing / 'jobs.db'}")
    engine = db.make_engine(settings)
    try:
        with pytest.raises(StoreUnavailable):
            accept(engine)
        with pytest.raises(StoreUnavailable):
            db.read(engine, counts)
    finally:
        engine.dispose()
    assert not missing.exists()


def test_a_read_only_database_file_is_store_unavailable_and_the_job_is_not_written(shared_dir: Path) -> None:
    settings = sqlite_settings(shared_dir, store_lock_timeout_seconds=1.0)
    setup = db.make_engine(settings)
    migrate.init_schema(settings, setup)
    accept(setup, "before")
    setup.dispose()
    database = shared_dir / "jobs.db"
    database.chmod(0o444)
    with file_modes_enforced():
        engine = db.make_engine(settings)
        try:
            with pytest.raises(StoreUnavailable):
                accept(engine, "refused")
        finally:
            engine.dispose()
    database.chmod(0o644)
    check = db.make_engine(settings)
    try:
        assert db.read(check, counts) == (1, 1)
    finally:
        check.dispose()


@contextmanager
def write_lock_held_elsewhere(database: Path) -> Iterator[None]:
    with subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(database)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdin is not None and holder.stdout is not None
        try:
            ready, _, _ = io_select.select([holder.stdout], [], [], WAIT)
            assert ready and holder.stdout.readline().strip() == "locked", "the other process took no lock"
            yield
        finally:
            holder.stdin.close()
            try:
                holder.wait(WAIT)
            except subprocess.TimeoutExpired:
                holder.kill()
                holder.wait(WAIT)


@pytest.fixture
def locked_store(tmp_path: Path) -> Iterator[tuple[Settings, Engine]]:
    settings = sqlite_settings(tmp_path, store_lock_timeout_seconds=0.4)
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    yield settings, engine
    engine.dispose()


def test_a_write_lock_held_by_another_process_past_the_timeout_is_store_unavailable(
    locked_store: tuple[Settings, Engine],
) -> None:
    settings, engine = locked_store
    database = db.sqlite_path(settings)
    assert database is not None
    with write_lock_held_elsewhere(database):
        retries_before = db.stats.snapshot()["retries"]
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="busy"):
            accept(engine)
        waited = time.monotonic() - started
        assert db.stats.snapshot()["retries"] > retries_before
        assert db.read(engine, counts) == (0, 0), "reads still work while the lock is held"
    assert settings.store_lock_timeout_seconds <= waited < settings.store_lock_timeout_seconds + 5
    assert db.read(engine, counts) == (0, 0)
    assert accept(engine).created, "the store takes writes again once the lock is released"
    assert db.read(engine, counts) == (1, 1)


@pytest.fixture
def store_dir(tmp_path: Path) -> Iterator[tuple[Engine, Path]]:
    """A store in a directory of its own (to be removed or replaced), and an engine already using it."""
    directory = tmp_path / "store"
    settings = make_settings(tmp_path, database_url=f"sqlite:///{directory / 'jobs.db'}")
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    yield engine, directory
    engine.dispose()


def backup(database: Path, to: Path) -> None:
    """A consistent copy of a live store (SQLite's online backup)."""
    with closing(sqlite3.connect(database)) as source, closing(sqlite3.connect(to)) as copy:
        source.backup(copy)


def keys_in(database: Path) -> set[str]:
    """The idempotency keys in the file at `database`, read without the store's engine."""
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as conn:
        return {row[0] for row in conn.execute("SELECT operation_key FROM jobs")}


def test_a_store_directory_removed_under_a_running_engine_is_unavailable_until_it_is_restored(
    store_dir: tuple[Engine, Path], tmp_path: Path
) -> None:
    engine, directory = store_dir
    kept = accept(engine, "before")
    backup(directory / "jobs.db", tmp_path / "backup.db")

    shutil.rmtree(directory)  # the pooled connection still has the removed file open

    with pytest.raises(StoreUnavailable, match="no store at"):
        accept(engine, "while-gone")
    with pytest.raises(StoreUnavailable, match="no store at"):
        db.read(engine, queries.get_job, kept.job.id)
    assert not directory.exists(), "nothing re-created the store"

    directory.mkdir()
    (tmp_path / "backup.db").rename(directory / "jobs.db")
    assert db.read(engine, queries.get_job, kept.job.id) is not None
    assert accept(engine, "after").created
    assert keys_in(directory / "jobs.db") == {"before", "after"}


def test_writes_go_to_the_store_the_path_names_now_once_another_is_mounted_there(
    store_dir: tuple[Engine, Path], tmp_path: Path
) -> None:
    engine, directory = store_dir
    accept(engine, "before")
    backup(directory / "jobs.db", tmp_path / "backup.db")
    accept(engine, "old-store-only")

    directory.rename(tmp_path / "old-store")  # another volume takes the store's place
    directory.mkdir()
    (tmp_path / "backup.db").rename(directory / "jobs.db")
    assert accept(engine, "after").created

    assert keys_in(directory / "jobs.db") == {"before", "after"}
    assert keys_in(tmp_path / "old-store" / "jobs.db") == {"before", "old-store-only"}


def test_a_store_removed_while_a_transaction_commits_is_unavailable_not_a_lost_write(
    store_dir: tuple[Engine, Path],
) -> None:
    engine, directory = store_dir

    def accept_then_remove_the_store(conn: Connection) -> intake.Accepted:
        accepted = intake.accept(
            conn, tenant="acme", owner="alice", kind="noop", payload={}, operation_key="doomed",
            now=time.time(), max_attempts=3,
        )  # fmt: skip
        shutil.rmtree(directory, ignore_errors=True)
        return accepted

    with pytest.raises(StoreUnavailable, match="no store at"):
        db.transact(engine, accept_then_remove_the_store)
    assert not directory.exists()


def test_a_transaction_that_committed_to_a_replaced_store_runs_again_on_the_new_one(
    store_dir: tuple[Engine, Path], tmp_path: Path
) -> None:
    engine, directory = store_dir
    backup(directory / "jobs.db", tmp_path / "backup.db")
    runs: list[str] = []

    def accept_and_replace_the_store_once(conn: Connection) -> intake.Accepted:
        accepted = intake.accept(
            conn, tenant="acme", owner="alice", kind="noop", payload={}, operation_key="k",
            now=time.time(), max_attempts=3,
        )  # fmt: skip
        runs.append(accepted.job.id)
        if len(runs) == 1:
            directory.rename(tmp_path / "old-store")
            directory.mkdir()
            (tmp_path / "backup.db").rename(directory / "jobs.db")
        return accepted

    accepted = db.transact(engine, accept_and_replace_the_store_once)

    assert len(runs) == 2 and accepted.job.id == runs[1]
    assert keys_in(directory / "jobs.db") == {"k"}
    assert db.read(engine, queries.get_job, accepted.job.id) is not None

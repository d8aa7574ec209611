"""`bench.pausing.paused`: the api-alone phase stops the other processes at a moment none of them holds
the store's writer queue or SQLite's write lock, so the api is not left waiting on a stopped writer."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from outbox_bridge.bench import pausing
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore.drivers.sqlite import writer_queue_path
from outbox_bridge.launch.stack import Service

pytestmark = pytest.mark.databases("sqlite")

# Half of its time inside a write transaction: on SQLite's lock alone, or under the writer queue's file lock.
HOLDER = """
import fcntl, os, sqlite3, sys, time
path, queued = sys.argv[1], sys.argv[2] == "queue"
conn = sqlite3.connect(path, isolation_level=None)
fd = os.open(path + "-write-turn", os.O_RDWR | os.O_CREAT)
print("ready", flush=True)
while True:
    if queued:
        fcntl.flock(fd, fcntl.LOCK_EX)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO ticks VALUES (1)")
    time.sleep(0.05)
    conn.execute("COMMIT")
    if queued:
        fcntl.flock(fd, fcntl.LOCK_UN)
    time.sleep(0.05)
"""


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE ticks (n INTEGER)")
    assert writer_queue_path(path) == Path(f"{path}-write-turn")  # the holder's queue file is the store's
    return path


def started(tmp_path: Path, *args: str) -> Service:
    popen = subprocess.Popen([sys.executable, "-c", *args], stdout=subprocess.PIPE)
    return Service("holder", list(args), tmp_path / "holder.log", popen)


@pytest.fixture(params=["lock", "queue"])
def holder(request: pytest.FixtureRequest, store: Path, tmp_path: Path) -> Iterator[Service]:
    holder = started(tmp_path, HOLDER, str(store), request.param)
    popen = holder.popen
    assert popen.stdout is not None and popen.stdout.readline().strip() == b"ready"
    yield holder
    popen.send_signal(signal.SIGCONT)
    popen.kill()
    popen.communicate(timeout=10)


def test_a_writer_is_stopped_only_outside_its_transaction_and_runs_again_after(
    settings: Settings, store: Path, holder: Service
) -> None:
    on_store = settings.model_copy(update={"database_url": f"sqlite:///{store}"})
    for _ in range(10):  # a stop at any moment would land inside a transaction in about half of them
        with pausing.paused([holder], on_store) as tries:
            assert 1 <= tries <= pausing.TRIES
            assert pausing._stopped(holder.pid)
            assert pausing.writable(store), "stopped while heading the writer queue or holding the lock"
        deadline = time.monotonic() + 5
        while pausing._stopped(holder.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not pausing._stopped(holder.pid), "not resumed"
    before = _ticks(store)
    time.sleep(0.5)
    assert _ticks(store) > before, "the writer does not write again after the pauses"


def test_on_postgresql_the_first_stop_stands(settings: Settings, tmp_path: Path) -> None:
    sleeper = started(tmp_path, "import time; time.sleep(60)")
    try:
        on_postgresql = settings.model_copy(update={"database_url": "postgresql+psycopg://u@127.0.0.1/db"})
        with pausing.paused([sleeper], on_postgresql) as tries:
            assert tries == 1 and pausing._stopped(sleeper.pid)
    finally:
        sleeper.popen.kill()
        sleeper.popen.communicate(timeout=10)


def _ticks(store: Path) -> int:
    with sqlite3.connect(store, timeout=5) as conn:
        return int(conn.execute("SELECT count(*) FROM ticks").fetchone()[0])

"""How fast this machine commits to SQLite right now: single-row commits per second in one connection
(WAL, `BEGIN IMMEDIATE`, the deployment's `synchronous`), on a scratch file beside the store.

Every write transaction of the job system waits for the same commit path, so this ceiling explains most
of the spread between runs on a shared machine (fsync latency swings with other work on the disk)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

SECONDS = 2.0


def single_row_commits(directory: Path, synchronous: str, seconds: float = SECONDS) -> dict[str, Any]:
    path = directory / f"calibrate-{synchronous.lower()}.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT)")
        commits, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (v) VALUES ('x')")
            conn.execute("COMMIT")
            commits += 1
    finally:
        conn.close()
        for leftover in directory.glob(f"{path.name}*"):
            leftover.unlink(missing_ok=True)
    return {
        "how": "one connection, WAL, BEGIN IMMEDIATE + one-row INSERT + COMMIT in a loop",
        "synchronous": synchronous,
        "seconds": round(elapsed, 2),
        "commits_per_second": round(commits / elapsed, 1),
    }

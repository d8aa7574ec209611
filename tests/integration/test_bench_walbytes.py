"""`python -m outbox_bridge.bench.walbytes`: each step of a job's life, measured on a real SQLite file, wrote
to the WAL."""

from __future__ import annotations

from pathlib import Path

from outbox_bridge.bench.walbytes import STEPS, measure


def test_every_step_of_a_jobs_life_writes_whole_pages_to_the_wal(tmp_path: Path) -> None:
    found = measure(tmp_path / "walbytes.db", history=32, rounds=3, batch=4)
    assert list(found) == list(STEPS)
    page = 4096
    assert all(size >= page for size in found.values()), found
    assert found["accept"] >= 3 * page, "a job row, its outbox row and their index entries"

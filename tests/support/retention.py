"""Jobs that finished (or died) at a given time, with the files their attempts wrote as `export` names
them, and what the tables and the results directory hold: for the job retention's tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select

from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.base import file_output
from outbox_bridge.jobstore import db, fenced, operator, sweeper
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.schema import attempts, jobs, outbox
from outbox_bridge.worker.commit import backoff_of
from tests.support.store import claimed, new_job


def write_output(settings: Settings, taken: Claim, suffix: str = ".csv", content: bytes = b"id\n1\n") -> str:
    """A file an export attempt writes, as `export` names it; returns its path under RESULTS_DIR."""
    relative = f"{taken.job_id}/{taken.attempt_id}{suffix}"
    path = settings.results_dir / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return relative


def succeeded(engine: Engine, settings: Settings, key: str, at: float) -> str:
    """An export that succeeded at `at`, its committed file on disk."""
    job_id = new_job(engine, key, kind="export", payload={"rows": 1, "chunk": 1}, now=at)
    taken = claimed(engine, job_id, now=at)
    output = file_output(write_output(settings, taken), "text/csv")
    db.transact(engine, fenced.complete, job_id, taken.epoch, taken.attempt_id, output, at)
    return job_id


def failed(engine: Engine, settings: Settings, key: str, at: float) -> str:
    job_id = new_job(engine, key, now=at)
    taken = claimed(engine, job_id, now=at)
    db.transact(
        engine, fenced.fail, job_id, taken.epoch, taken.attempt_id,
        code="bad_input", message="no", permanent=True, now=at, backoff=backoff_of(settings),
    )  # fmt: skip
    return job_id


def cancelled(engine: Engine, key: str, at: float) -> str:
    job_id = new_job(engine, key, now=at)
    assert db.transact(engine, operator.request_cancel, job_id, at) is operator.CancelOutcome.CANCELLED
    return job_id


def lost(
    engine: Engine, settings: Settings, key: str, at: float, *, external: bool = False
) -> tuple[str, Claim]:
    """A job whose only attempt crashed after writing its file: the sweeper ends it `dead` (or `unknown`
    once an external effect had started) just after `at`."""
    job_id = new_job(engine, key, kind="export", payload={"rows": 1, "chunk": 1}, max_attempts=1, now=at)
    taken = claimed(engine, job_id, lease=5, now=at)
    write_output(settings, taken)
    if external:
        db.transact(engine, fenced.mark_external_started, job_id, taken.epoch, taken.attempt_id, at)
    db.transact(engine, sweeper.sweep_expired, at + 10, backoff=backoff_of(settings))
    return job_id, taken


def table_ids(engine: Engine) -> dict[str, set[str]]:
    """The job ids each table holds rows for."""

    def read(conn: Any) -> dict[str, set[str]]:
        return {
            "jobs": set(conn.execute(select(jobs.c.id)).scalars()),
            "attempts": set(conn.execute(select(attempts.c.job_id)).scalars()),
            "outbox": set(conn.execute(select(outbox.c.job_id)).scalars()),
        }

    return db.read(engine, read)


def files_under(directory: Path) -> set[str]:
    return {p.relative_to(directory).as_posix() for p in directory.rglob("*")}


def age(path: Path, at: float) -> None:
    """Make `path` look last changed at `at`."""
    os.utime(path, (at, at))

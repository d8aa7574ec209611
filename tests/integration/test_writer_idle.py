"""A process's store writer that claimed ahead while its jobs were short looks every moment at how long the
jobs it holds have run (`worker.budget`), to stop claiming ahead behind one that runs long. Once it holds no
job, none can run long: it sleeps until work arrives instead of waking every moment for nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, func, select

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.schema import jobs
from outbox_bridge.jobstore.states import State
from outbox_bridge.worker import completer
from outbox_bridge.worker.budget import AHEAD_SECONDS
from outbox_bridge.worker.inbox import MAX_BATCH
from outbox_bridge.worker.lease import LeaseKeeper
from outbox_bridge.worker.writer import StoreWriter
from tests.support.procs import wait_for
from tests.support.store import new_jobs

JOBS = 40  # short noop jobs: past the budget's run of short jobs, so the writer claims ahead


@dataclass(frozen=True)
class Delivered:
    job_id: str
    priority: int = 1
    tenant: str = "acme"
    traceparent: str | None = None


def succeeded(engine: Engine) -> int:
    query = select(func.count()).select_from(jobs).where(jobs.c.state == State.SUCCEEDED.value)
    return int(db.read(engine, lambda conn: conn.execute(query).scalar_one()))


def test_a_writer_that_holds_no_job_sleeps_until_work_arrives(
    engine: Engine, settings_factory: Callable[..., Settings], monkeypatch: Any
) -> None:
    waits: list[float | None] = []
    take_batch = completer.take_batch

    def counted(source: Any, limit: int = MAX_BATCH, timeout: float | None = None) -> Any:
        waits.append(timeout)
        return take_batch(source, limit, timeout)

    monkeypatch.setattr(completer, "take_batch", counted)
    settings = settings_factory()
    keeper = LeaseKeeper(engine, settings).start()
    writer = StoreWriter(
        engine, settings, keeper, concurrency=2, worker="idle-writer", role="consumer"
    ).start()
    try:
        for job_id in new_jobs(engine, JOBS, kind="noop"):
            writer.offer(Delivered(job_id))
        wait_for(lambda: succeeded(engine) == JOBS, 30, what=f"{JOBS} jobs succeeded")
        wait_for(lambda: writer.in_flight() == 0, 10, what="every outcome committed")
        assert AHEAD_SECONDS in waits, "the writer claimed ahead, looking every moment while it held jobs"

        time.sleep(0.2)  # the last round's wait is taken
        before = len(waits)
        time.sleep(1.0)
        assert len(waits) - before <= 1, waits[before:]
        assert waits[-1] is None

        # Work that arrives still wakes it at once.
        [job_id] = new_jobs(engine, 1, kind="noop")
        writer.offer(Delivered(job_id))
        wait_for(lambda: succeeded(engine) == JOBS + 1, 10, what="the job that came after the pause")
    finally:
        writer.close()
        keeper.stop()

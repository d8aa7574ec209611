"""Running one claimed job through the real runner against a real store, for the job kinds' tests."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from core.clock import now
from core.settings import Settings
from handlers.runner import LeaseKeeper, execute
from jobstore import claiming, db, queries
from jobstore.records import Claim, Job
from jobstore.states import State


def claim(engine: Engine, settings: Settings, job_id: str) -> Claim:
    result = db.transact(engine, claiming.claim, job_id, "worker-1", now(), settings.lease_seconds)
    assert result.claim is not None, result.refusal
    return result.claim


def run(engine: Engine, settings: Settings, claimed: Claim) -> State | None:
    """Run the claimed job to its committed outcome, with a lease keeper that renews often."""
    keeper = LeaseKeeper(engine, settings, interval=0.05).start()
    try:
        return execute(engine, settings, keeper, claimed)
    finally:
        keeper.stop()


def job_of(engine: Engine, job_id: str) -> Job:
    job = db.read(engine, queries.get_job, job_id)
    assert job is not None
    return job


def committed_output(engine: Engine, job_id: str) -> dict[str, Any]:
    attempt = db.read(engine, queries.committed_result, job_id)
    assert attempt is not None and attempt.output is not None
    return attempt.output

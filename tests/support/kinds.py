"""Running one claimed job through the real runner against a real store, for the job kinds' tests."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from core.settings import Settings
from handlers.runner import LeaseKeeper, execute
from jobstore import db, queries
from jobstore.records import Claim
from jobstore.states import State
from tests.support.store import claimed


def claim(engine: Engine, settings: Settings, job_id: str) -> Claim:
    """The job claimed by worker-1 for the deployment's lease."""
    return claimed(engine, job_id, "worker-1", lease=settings.lease_seconds)


def run(engine: Engine, settings: Settings, claimed: Claim) -> State | None:
    """Run the claimed job to its committed outcome, with a lease keeper that renews often."""
    keeper = LeaseKeeper(engine, settings, interval=0.05).start()
    try:
        return execute(engine, settings, keeper, claimed)
    finally:
        keeper.stop()


def committed_output(engine: Engine, job_id: str) -> dict[str, Any]:
    attempt = db.read(engine, queries.committed_result, job_id)
    assert attempt is not None and attempt.output is not None
    return attempt.output

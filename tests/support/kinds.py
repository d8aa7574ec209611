"""Running one claimed job through the real worker runtime against a real store, for the job kinds' tests."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from core.clock import now
from core.settings import Settings
from jobstore import db, queries
from jobstore import jobs as store
from jobstore.records import Claim, Job
from jobstore.states import State
from worker.attempt import StoreContext, discard_uncommitted, run_attempt
from worker.commit import backoff_of, commit_outcomes
from worker.lease import LeaseKeeper


def claim(engine: Engine, settings: Settings, job_id: str) -> Claim:
    result = db.transact(engine, store.claim, job_id, "worker-1", now(), settings.lease_seconds)
    assert result.claim is not None, result.refusal
    return result.claim


def execute(engine: Engine, settings: Settings, keeper: LeaseKeeper, claimed: Claim) -> State | None:
    """Run a claimed job to its committed outcome with the pieces both worker modes run: hold its lease,
    run the attempt, commit the outcome, discard an uncommitted output. Returns the committed state, or None
    when fenced out."""
    held = keeper.hold(claimed)
    try:
        outcome = run_attempt(StoreContext(engine, settings, claimed, held))
        [state] = db.transact(engine, commit_outcomes, [(claimed, outcome)], now(), backoff_of(settings))
        discard_uncommitted(settings, claimed, outcome, state)
        return state
    finally:
        keeper.drop(claimed.job_id)


def run(engine: Engine, settings: Settings, claimed: Claim) -> State | None:
    """Run the claimed job to its committed outcome, with a lease keeper that renews often."""
    keeper = LeaseKeeper(engine, settings, interval=0.05).start()
    try:
        return execute(engine, settings, keeper, claimed)
    finally:
        keeper.stop()


def job_of(engine: Engine, job_id: str) -> Job:
    job = db.read(engine, store.get_job, job_id)
    assert job is not None
    return job


def committed_output(engine: Engine, job_id: str) -> dict[str, Any]:
    attempt = db.read(engine, queries.committed_result, job_id)
    assert attempt is not None and attempt.output is not None
    return attempt.output

"""Running one claimed job through the real worker runtime against a real store, for the job kinds' tests."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from outbox_bridge.core.clock import now
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, queries
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.states import State
from outbox_bridge.worker.attempt import StoreContext, discard_uncommitted, run_attempt
from outbox_bridge.worker.commit import backoff_of, commit_outcomes
from outbox_bridge.worker.lease import LeaseKeeper
from tests.support.store import claimed


def claim(engine: Engine, settings: Settings, job_id: str) -> Claim:
    """The job claimed by worker-1 for the deployment's lease."""
    return claimed(engine, job_id, "worker-1", lease=settings.lease_seconds)


def execute(engine: Engine, settings: Settings, keeper: LeaseKeeper, taken: Claim) -> State | None:
    """Run a claimed job to its committed outcome with the pieces both worker modes run: hold its lease,
    run the attempt, commit the outcome, discard an uncommitted output. Returns the committed state, or None
    when fenced out."""
    held = keeper.hold(taken)
    try:
        outcome = run_attempt(StoreContext(engine, settings, taken, held))
        [state] = db.transact(engine, commit_outcomes, [(taken, outcome)], now(), backoff_of(settings))
        discard_uncommitted(settings, taken, outcome, state)
        return state
    finally:
        keeper.drop(taken.job_id)


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

"""Committing attempt outcomes under the fence, in the caller's transaction, so a caller may commit the
outcomes of several jobs together."""

from __future__ import annotations

from sqlalchemy import Connection

from core.settings import Settings
from handlers.base import JobError
from jobstore import jobs as store
from jobstore.errors import Fenced
from jobstore.records import Claim
from jobstore.states import State
from worker.attempt import AttemptOutcome


def commit_outcome(
    conn: Connection, claim: Claim, outcome: AttemptOutcome, now: float, backoff: store.Backoff
) -> State | None:
    """Write the attempt's outcome under the fence. None when the worker was fenced out (nothing written)."""
    if outcome.lease_lost:
        return None
    try:
        if outcome.output is not None and not outcome.cancelled:
            return store.complete(conn, claim.job_id, claim.epoch, claim.attempt_id, outcome.output, now)
        if outcome.cancelled:
            error = JobError("cancelled", "cancelled while running")
        else:
            error = outcome.error or JobError("handler_error", "no output")
        decision = store.fail(
            conn,
            claim.job_id,
            claim.epoch,
            claim.attempt_id,
            code=error.code,
            message=error.message,
            permanent=outcome.permanent,
            now=now,
            backoff=backoff,
        )
        return decision.state
    except Fenced:
        return None


def backoff_of(settings: Settings) -> store.Backoff:
    return store.Backoff(settings.backoff_base_seconds, settings.backoff_max_seconds)

"""Giving a claimed job back unfinished when a worker stops before the job ends."""

from __future__ import annotations

import logging
from enum import StrEnum

from sqlalchemy import Engine

from core import clock
from jobstore import db, fenced, queries
from jobstore.errors import Fenced
from jobstore.records import Claim
from jobstore.states import State

log = logging.getLogger(__name__)


class Handback(StrEnum):
    """What became of a job a stopping worker tried to give back."""

    RELEASED = "released"  # queued again, available now, its attempt not counted
    MUST_FINISH = "must_finish"  # its external effect started: the store refuses; the attempt has to end
    NOT_HELD = "not_held"  # no longer this worker's: it finished meanwhile, or its lease or deadline ran out
    UNREACHABLE = "unreachable"  # the store did not answer: its lease runs out and a sweeper takes it back


def hand_back(engine: Engine, claim: Claim) -> Handback:
    """Release `claim` through `fenced.release` under its fence. Only RELEASED means the caller must stop the
    attempt; on MUST_FINISH it must let the attempt finish and commit."""
    try:
        db.transact(engine, fenced.release, claim.job_id, claim.epoch, claim.attempt_id, clock.now())
    except Fenced:
        return _why_refused(engine, claim)
    except db.StoreUnavailable as exc:
        log.warning("job %s epoch %d: could not release it: %s", claim.job_id, claim.epoch, exc)
        return Handback.UNREACHABLE
    return Handback.RELEASED


def _why_refused(engine: Engine, claim: Claim) -> Handback:
    try:
        job = db.read(engine, queries.get_job, claim.job_id)
    except db.StoreUnavailable:
        return Handback.UNREACHABLE
    ours = job is not None and job.state is State.RUNNING and job.epoch == claim.epoch
    if ours and job is not None and job.external_epoch == claim.epoch:
        return Handback.MUST_FINISH
    return Handback.NOT_HELD

"""Giving claimed jobs back unfinished when a worker stops before they end: one way for both worker modes."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from enum import StrEnum

from sqlalchemy import Engine

from outbox_bridge.core import clock
from outbox_bridge.jobstore import db, fenced, queries
from outbox_bridge.jobstore.errors import Fenced
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.states import State
from outbox_bridge.worker.lease import LeasedJob

log = logging.getLogger(__name__)


class Release(StrEnum):
    """What became of a job a stopping worker tried to give back."""

    RELEASED = "released"  # queued again, available now, its attempt not counted
    MUST_FINISH = "must_finish"  # its external effect started: the store refuses; the attempt has to end
    NOT_HELD = "not_held"  # no longer this worker's: it finished meanwhile, or its lease or deadline ran out
    UNREACHABLE = "unreachable"  # the store did not answer: its lease runs out and a sweeper takes it back


def release(engine: Engine, claim: Claim) -> Release:
    """Release `claim` through `fenced.release` under its fence. Only RELEASED means the caller must stop the
    attempt; on MUST_FINISH it must let the attempt finish and commit."""
    try:
        db.transact(engine, fenced.release, claim.job_id, claim.epoch, claim.attempt_id, clock.now())
    except Fenced:
        return _why_refused(engine, claim)
    except db.StoreUnavailable as exc:
        log.warning("job %s epoch %d: could not release it: %s", claim.job_id, claim.epoch, exc)
        return Release.UNREACHABLE
    return Release.RELEASED


def _why_refused(engine: Engine, claim: Claim) -> Release:
    try:
        job = db.read(engine, queries.get_job, claim.job_id)
    except db.StoreUnavailable:
        return Release.UNREACHABLE
    ours = job is not None and job.state is State.RUNNING and job.epoch == claim.epoch
    if ours and job is not None and job.external_epoch == claim.epoch:
        return Release.MUST_FINISH
    return Release.NOT_HELD


def _nothing(_held: LeasedJob) -> None:
    return None


def release_all(
    engine: Engine, held: Iterable[LeasedJob], on_released: Callable[[LeasedJob], None] = _nothing
) -> Counter[Release]:
    """Give back each held job (`release`) and count what became of them. A released job is marked lost,
    so its running attempt stops at its next check and what it returns is fenced out; then
    `on_released(held)`. A job not released keeps running: the caller lets it finish."""
    results: Counter[Release] = Counter()
    for one in held:
        one.handed_back = True  # before the release: an attempt fenced out by it knows why
        result = release(engine, one.claim)
        if result is Release.RELEASED:
            one.lost = True
            on_released(one)
        else:
            one.handed_back = False
        log.info("job %s epoch %d: %s", one.claim.job_id, one.claim.epoch, result.value)
        results[result] += 1
    return results

"""Committing attempt outcomes: what is written for every outcome, in both worker modes (the completer's
rounds, `worker.completer`) and inline (`outbox_bridge.testing`).

Each outcome is written under its own fence in the caller's transaction, so a caller may commit the
outcomes of several jobs together (and claim more work in the same transaction); a fenced one writes
nothing and does not disturb the others."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from sqlalchemy import Connection

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.settings import MAX_SNOOZES, Settings
from outbox_bridge.handlers.base import JobError
from outbox_bridge.handlers.registry import KINDS
from outbox_bridge.jobstore import fenced
from outbox_bridge.jobstore import limits as flow
from outbox_bridge.jobstore.errors import Fenced
from outbox_bridge.jobstore.limits import NONE, Ended, Limits
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.states import State
from outbox_bridge.worker.attempt import AttemptOutcome


def commit_outcomes(
    conn: Connection,
    outcomes: Sequence[tuple[Claim, AttemptOutcome]],
    now: float,
    backoff: Backoff,
    limits: Limits = NONE,
    *,
    max_snoozes: int = MAX_SNOOZES,
) -> list[State | None]:
    """Write each (claim, outcome) under its own fence in the caller's transaction: the successes
    together (`fenced.complete_many`), a snooze through `fenced.snooze` (a job may snooze `max_snoozes`
    times), every other outcome through `fenced.fail`. A retry waits as the kind's own `backoff` says, else
    as `backoff` does. Returns the committed state of each, in order; None where the worker was fenced out
    or had lost its lease (nothing written for it)."""
    succeeded = [i for i, (_, outcome) in enumerate(outcomes) if _succeeded(outcome)]
    completed = fenced.complete_many(conn, [_finishing(*outcomes[i]) for i in succeeded], now)
    states = dict(zip(succeeded, completed, strict=True))
    written = [
        states[i] if i in states else _unfinished(conn, claim, outcome, now, backoff, max_snoozes)
        for i, (claim, outcome) in enumerate(outcomes)
    ]
    ended = (
        Ended(claim.tenant, claim.kind, claim.concurrency_key)
        for (claim, _), state in zip(outcomes, written, strict=True)
        if state is not None and state is not State.RUNNING
    )
    flow.release(conn, limits, ended, now)
    return written


def _succeeded(outcome: AttemptOutcome) -> bool:
    """An output to publish (None is the result `null`): neither cancelled nor fenced out after the kind
    returned it."""
    return outcome.succeeded


def _finishing(claim: Claim, outcome: AttemptOutcome) -> fenced.Completion:
    return fenced.Completion(claim.job_id, claim.epoch, claim.attempt_id, outcome.output)


def _unfinished(
    conn: Connection,
    claim: Claim,
    outcome: AttemptOutcome,
    now: float,
    backoff: Backoff,
    max_snoozes: int,
) -> State | None:
    """End an attempt that produced no result to publish; None when fenced out (nothing written)."""
    if outcome.lease_lost:
        return None
    backoff = kind_backoff(claim.kind, backoff)
    if outcome.snooze is None:
        return _fail(conn, claim, outcome, now, backoff)
    try:
        decision = fenced.snooze(
            conn,
            claim.job_id,
            claim.epoch,
            claim.attempt_id,
            seconds=outcome.snooze,
            now=now,
            max_snoozes=max_snoozes,
            backoff=backoff,
        )
    except Fenced:
        return None
    return decision.state


def _fail(
    conn: Connection, claim: Claim, outcome: AttemptOutcome, now: float, backoff: Backoff
) -> State | None:
    if outcome.cancelled:
        error = JobError("cancelled", "cancelled while running")
    else:
        error = outcome.error or JobError("handler_error", "no output")
    try:
        decision = fenced.fail(
            conn,
            claim.job_id,
            claim.epoch,
            claim.attempt_id,
            code=error.code,
            message=error.message,
            permanent=outcome.permanent,
            now=now,
            backoff=backoff,
            detail=error.detail,
        )
    except Fenced:
        return None
    return decision.state


def backoff_of(settings: Settings) -> Backoff:
    return Backoff(settings.backoff_base_seconds, settings.backoff_max_seconds)


def kind_backoff(kind: str, default: Backoff) -> Backoff:
    """The backoff of `kind`'s retries: its own `backoff=(base, cap)`, else `default` (the settings')."""
    known = KINDS.get(kind)
    pair = None if known is None else known.policy.backoff
    return default if pair is None else replace(default, base=pair[0], cap=pair[1])

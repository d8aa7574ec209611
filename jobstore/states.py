"""The job states and the only transitions the store allows between them.

Each guarded UPDATE that changes a job's state is a `Move` below, and takes its from-states from it (its
WHERE clause is built from `Move.sources`), so `TRANSITIONS`, the table the tests check, is the union of what
the store can actually do rather than a description kept beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class State(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


TERMINAL: frozenset[State] = frozenset(
    {State.SUCCEEDED, State.FAILED, State.DEAD, State.CANCELLED, State.UNKNOWN}
)
ACTIVE: frozenset[State] = frozenset({State.QUEUED, State.RUNNING})
# `unknown` is terminal for workers (nothing retries it) but an operator may still settle it. A `failed` job
# (a permanent input problem) may be requeued once its cause is fixed outside the job (a missing file, a
# handler bug), so it is requeueable too; `succeeded` and `cancelled` are final.
OPERATOR_REQUEUEABLE: frozenset[State] = frozenset({State.FAILED, State.DEAD, State.UNKNOWN})
RESOLVABLE_TO: frozenset[State] = frozenset({State.SUCCEEDED, State.FAILED})
# What the job retention deletes once finished long enough: every terminal state but `unknown`, which keeps
# its job until an operator has settled it.
PRUNABLE: frozenset[State] = TERMINAL - {State.UNKNOWN}


@dataclass(frozen=True)
class Move:
    """One guarded transition of the store: the states it takes a job from, and those it may leave it in."""

    sources: frozenset[State]
    targets: frozenset[State]


def _move(sources: set[State] | frozenset[State], targets: set[State] | frozenset[State]) -> Move:
    return Move(frozenset(sources), frozenset(targets))


# Worker moves. (A claim of a running job whose lease expired keeps it `running` under a new epoch: no
# state change, so it is no move here.)
CLAIM = _move({State.QUEUED}, {State.RUNNING})
COMPLETE = _move({State.RUNNING}, {State.SUCCEEDED, State.CANCELLED})
FAIL = _move({State.RUNNING}, {State.QUEUED, State.FAILED, State.DEAD, State.CANCELLED})
RELEASE = _move({State.RUNNING}, {State.QUEUED, State.CANCELLED})
# A kind snoozed its job (`outbox_bridge.Snooze`): queued again, due later, its attempt given back.
SNOOZE = _move({State.RUNNING}, {State.QUEUED})
# The sweeper's moves.
EXPIRE_LEASE = _move({State.RUNNING}, {State.QUEUED, State.DEAD, State.CANCELLED, State.UNKNOWN})
EXPIRE_QUEUED = _move({State.QUEUED}, {State.DEAD})
# Operator moves: cancel (a queued job at once), requeue (failed/dead/unknown -> queued) and resolve
# (unknown -> succeeded|failed).
CANCEL_QUEUED = _move({State.QUEUED}, {State.CANCELLED})
REQUEUE = _move(OPERATOR_REQUEUEABLE, {State.QUEUED})
RESOLVE = _move({State.UNKNOWN}, RESOLVABLE_TO)

MOVES: tuple[Move, ...] = (
    CLAIM, COMPLETE, FAIL, RELEASE, SNOOZE, EXPIRE_LEASE, EXPIRE_QUEUED, CANCEL_QUEUED, REQUEUE, RESOLVE,
)  # fmt: skip
# A job running for a worker is in the state the worker's moves start from: what a fence checks.
HELD: frozenset[State] = COMPLETE.sources | FAIL.sources | RELEASE.sources | SNOOZE.sources

TRANSITIONS: dict[State, frozenset[State]] = {
    src: frozenset(dst for move in MOVES if src in move.sources for dst in move.targets) for src in State
}


def can_transition(src: State, dst: State) -> bool:
    """True when the state machine allows moving a job from `src` to `dst`."""
    return dst in TRANSITIONS[src]

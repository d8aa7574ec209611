"""The job states and the only transitions the store allows between them."""

from __future__ import annotations

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
# `unknown` is terminal for workers (nothing retries it) but an operator may still settle it.
OPERATOR_REQUEUEABLE: frozenset[State] = frozenset({State.DEAD, State.UNKNOWN})
RESOLVABLE_TO: frozenset[State] = frozenset({State.SUCCEEDED, State.FAILED})

TRANSITIONS: dict[State, frozenset[State]] = {
    State.QUEUED: frozenset({State.RUNNING, State.CANCELLED, State.DEAD}),
    State.RUNNING: frozenset(
        {State.QUEUED, State.SUCCEEDED, State.FAILED, State.DEAD, State.CANCELLED, State.UNKNOWN}
    ),
    State.SUCCEEDED: frozenset(),
    State.FAILED: frozenset(),
    State.CANCELLED: frozenset(),
    # Operator actions: requeue (dead/unknown -> queued) and resolve (unknown -> succeeded|failed).
    State.DEAD: frozenset({State.QUEUED}),
    State.UNKNOWN: frozenset({State.QUEUED, State.SUCCEEDED, State.FAILED}),
}


def can_transition(src: State, dst: State) -> bool:
    """True when the state machine allows moving a job from `src` to `dst`."""
    return dst in TRANSITIONS[src]

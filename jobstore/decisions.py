"""Pure decisions: retry-or-dead, cancel-vs-complete, what a sweep does to an expired lease.

The store applies them inside its guarded transactions; they take plain values and do no I/O. (Backoff, which
the relays and the consumer use too, is `core.backoff`.)
"""

from __future__ import annotations

from dataclasses import dataclass

from outbox_bridge.jobstore.states import State

# A fault of the worker's own storage (`RESULTS_DIR` unwritable, full, failing) is not the job's: such an
# attempt is not counted against the job's budget but against this one of its own, with a longer backoff
# (STORAGE_RETRY_FIRST_SECONDS, doubling, at most STORAGE_RETRY_MAX_SECONDS: some 25 minutes in all).
STORAGE_FAULT = "storage_unavailable"
STORAGE_RETRY_BUDGET = 10
STORAGE_RETRY_FIRST_SECONDS = 5.0
STORAGE_RETRY_MAX_SECONDS = 300.0
# A kind's snooze (`outbox_bridge.Snooze`) past the job's MAX_SNOOZES: a failed attempt with this code.
SNOOZED_TOO_OFTEN = "snoozed_too_often"


@dataclass(frozen=True)
class Decision:
    state: State
    error_code: str | None = None
    error_message: str | None = None
    retry_in: float | None = None
    # The attempt is given back to the job's budget (a fault of the worker's storage, not of the job).
    refund: bool = False


def storage_retry_in(faults: int) -> float:
    """The pause before the next attempt after the job's `faults`-th storage fault (1, 2, ...)."""
    return min(STORAGE_RETRY_FIRST_SECONDS * 2 ** max(faults - 1, 0), STORAGE_RETRY_MAX_SECONDS)


def decide_failure(
    *,
    permanent: bool,
    attempts: int,
    max_attempts: int,
    cancel_requested: bool,
    deadline_passed: bool,
    backoff: float,
    code: str,
    message: str,
    storage_faults: int = 0,
) -> Decision:
    """What a failed attempt leads to: `failed` for a permanent error, `cancelled` when a cancel is waiting,
    `dead` when the budget or the deadline is spent, else `queued` again after `backoff`. An attempt that
    met the job's `storage_faults`-th fault of the worker's storage (this one included; 0: not such an
    attempt) is refunded to the job's budget and tried again after `storage_retry_in`, until
    STORAGE_RETRY_BUDGET of them are spent (then `dead`)."""
    if permanent:
        return Decision(State.FAILED, code, message)
    if cancel_requested:
        return Decision(State.CANCELLED, "cancelled", "cancelled before the job could finish")
    if deadline_passed:
        return Decision(State.DEAD, "deadline_exceeded", f"the deadline passed; the last attempt: {message}")
    if storage_faults >= STORAGE_RETRY_BUDGET:
        return Decision(
            State.DEAD, code, f"{storage_faults} attempts could not store their output; last: {message}"
        )
    if storage_faults:
        return Decision(State.QUEUED, code, message, retry_in=storage_retry_in(storage_faults), refund=True)
    if attempts >= max_attempts:
        return Decision(State.DEAD, "attempts_exhausted", f"{attempts} attempts failed; last: {message}")
    return Decision(State.QUEUED, code, message, retry_in=backoff)


def decide_completion(*, cancel_requested: bool, external_started: bool = False) -> State:
    """A finished attempt commits `succeeded` unless a cancel request was committed first. An attempt that
    started an external effect (an e-mail went out) ends `succeeded` even then: calling it `cancelled` would
    claim the effect did not happen.

    This function is the rule; each driver's completion statement (`complete_many` in its `completion.sql`)
    writes it out, and the store's tests hold that statement to it in every case of its inputs
    (`tests/integration/test_cancel_after_effect.py`)."""
    if cancel_requested and not external_started:
        return State.CANCELLED
    return State.SUCCEEDED


def decide_expired_lease(
    *,
    external_started: bool,
    attempts: int,
    max_attempts: int,
    cancel_requested: bool,
    deadline_passed: bool,
    backoff: float,
    lease_ran_out: bool = True,
) -> Decision:
    """What the sweeper does with a running job whose lease ran out, or (`lease_ran_out` false) whose
    worker still renews its lease but whose deadline passed. The message says which of the two it was.

    An external effect that may have happened is never repeated: `unknown`, for an operator to settle.
    """
    why = (
        "the worker stopped renewing its lease"
        if lease_ran_out
        else "the job was still running at its deadline"
    )
    if external_started:
        return Decision(
            State.UNKNOWN,
            "outcome_unknown",
            f"{why}, after starting an external effect; it may or may not have happened",
        )
    if not lease_ran_out and not cancel_requested:
        return Decision(State.DEAD, "deadline_exceeded", why)
    return decide_failure(
        permanent=False,
        attempts=attempts,
        max_attempts=max_attempts,
        cancel_requested=cancel_requested,
        deadline_passed=deadline_passed,
        backoff=backoff,
        code="lease_expired",
        message=why,
    )

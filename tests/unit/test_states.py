"""The state machine table: every move the store makes is in it; finished jobs stay finished for workers."""

from __future__ import annotations

import itertools

import pytest

from outbox_bridge.jobstore.decisions import decide_completion, decide_expired_lease, decide_failure
from outbox_bridge.jobstore.states import (
    ACTIVE,
    OPERATOR_REQUEUEABLE,
    RESOLVABLE_TO,
    TERMINAL,
    TRANSITIONS,
    State,
    can_transition,
)

# Every state change the guarded transitions in jobstore/{claiming,fenced,operator,sweeper}.py make, by name.
# (A claim of an expired lease keeps the job `running` under a new epoch: no state change, so not listed.)
STORE_MOVES: list[tuple[str, State, State]] = [
    ("claim", State.QUEUED, State.RUNNING),
    ("claim_next", State.QUEUED, State.RUNNING),
    ("complete", State.RUNNING, State.SUCCEEDED),
    ("complete after a cancel request", State.RUNNING, State.CANCELLED),
    ("release", State.RUNNING, State.QUEUED),
    ("release after a cancel request", State.RUNNING, State.CANCELLED),
    ("snooze", State.RUNNING, State.QUEUED),
    ("request_cancel on a queued job", State.QUEUED, State.CANCELLED),
    ("sweep_expired of a queued job past its deadline", State.QUEUED, State.DEAD),
    *[("requeue", src, State.QUEUED) for src in sorted(OPERATOR_REQUEUEABLE)],
    *[("resolve", State.UNKNOWN, dst) for dst in sorted(RESOLVABLE_TO)],
]


def all_failure_decisions() -> set[State]:
    """Every state `fail` (via decide_failure) can move a running job to, over all inputs."""
    flags = [False, True]
    return {
        decide_failure(
            permanent=permanent,
            attempts=attempts,
            max_attempts=3,
            cancel_requested=cancel,
            deadline_passed=deadline,
            backoff=1.0,
            code="c",
            message="m",
        ).state
        for permanent, attempts, cancel, deadline in itertools.product(flags, [1, 2, 3, 4], flags, flags)
    }


def all_expired_lease_decisions() -> set[State]:
    """Every state `sweep_expired` can move a running job with a lapsed lease to, over all inputs."""
    flags = [False, True]
    return {
        decide_expired_lease(
            external_started=external,
            attempts=attempts,
            max_attempts=3,
            cancel_requested=cancel,
            deadline_passed=deadline,
            backoff=1.0,
        ).state
        for external, attempts, cancel, deadline in itertools.product(flags, [1, 2, 3, 4], flags, flags)
    }


@pytest.mark.parametrize(
    ("move", "src", "dst"), STORE_MOVES, ids=[f"{m}:{s}->{d}" for m, s, d in STORE_MOVES]
)
def test_every_move_the_store_makes_is_in_the_table(move: str, src: State, dst: State) -> None:
    assert can_transition(src, dst), f"{move} moves {src} -> {dst}, which TRANSITIONS does not allow"


def test_every_outcome_of_a_failed_attempt_is_allowed_from_running() -> None:
    reached = all_failure_decisions()
    assert reached == {State.QUEUED, State.FAILED, State.DEAD, State.CANCELLED}
    assert all(can_transition(State.RUNNING, dst) for dst in reached)


def test_every_outcome_of_an_expired_lease_is_allowed_from_running() -> None:
    reached = all_expired_lease_decisions()
    assert reached == {State.QUEUED, State.DEAD, State.CANCELLED, State.UNKNOWN}
    assert all(can_transition(State.RUNNING, dst) for dst in reached)


def test_every_outcome_of_a_finished_attempt_is_allowed_from_running() -> None:
    for cancel_requested in (False, True):
        assert can_transition(State.RUNNING, decide_completion(cancel_requested=cancel_requested))


def test_the_table_covers_every_state_and_names_only_states() -> None:
    assert set(TRANSITIONS) == set(State)
    assert all(targets <= set(State) for targets in TRANSITIONS.values())


def test_every_state_is_either_active_or_terminal() -> None:
    assert ACTIVE | TERMINAL == set(State)
    assert not ACTIVE & TERMINAL


def test_no_state_moves_to_itself() -> None:
    assert all(not can_transition(s, s) for s in State)


@pytest.mark.parametrize("state", sorted(TERMINAL))
def test_a_terminal_state_has_no_worker_exit(state: State) -> None:
    """Only an operator moves a finished job: requeue (failed/dead/unknown -> queued) or resolve (unknown ->
    succeeded/failed). Nothing goes back to `running`, and nothing leaves succeeded/cancelled."""
    operator_exits: set[State] = set()
    if state in OPERATOR_REQUEUEABLE:
        operator_exits.add(State.QUEUED)
    if state is State.UNKNOWN:
        operator_exits |= RESOLVABLE_TO
    assert TRANSITIONS[state] == operator_exits
    assert not can_transition(state, State.RUNNING)


@pytest.mark.parametrize("state", [State.SUCCEEDED, State.CANCELLED])
def test_a_settled_outcome_is_final(state: State) -> None:
    assert TRANSITIONS[state] == frozenset()


def test_an_operator_requeues_failed_dead_and_unknown_jobs_only() -> None:
    assert {src for src in State if can_transition(src, State.QUEUED) and src is not State.RUNNING} == {
        State.FAILED,
        State.DEAD,
        State.UNKNOWN,
    }


def test_a_job_reaches_running_only_from_queued() -> None:
    assert {src for src in State if can_transition(src, State.RUNNING)} == {State.QUEUED}


def test_only_a_running_job_can_end_unknown_or_succeed_without_an_operator() -> None:
    assert {src for src in State if can_transition(src, State.UNKNOWN)} == {State.RUNNING}
    assert {src for src in State if can_transition(src, State.SUCCEEDED)} == {State.RUNNING, State.UNKNOWN}

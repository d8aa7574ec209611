"""The states the operator's moves, the sweeper and the retention take jobs from are written into their named
statements as literals (so that each is planned on its state's index); in each driver's text they are the
states `jobstore.states` says each move takes, and no others."""

from __future__ import annotations

import re

import pytest

from outbox_bridge.jobstore import drivers
from outbox_bridge.jobstore.states import (
    CANCEL_QUEUED,
    EXPIRE_LEASE,
    EXPIRE_QUEUED,
    HELD,
    PRUNABLE,
    RESOLVE,
    State,
)

# Each statement, and the states its WHERE clause takes a job from.
FROM_STATES: dict[str, frozenset[State]] = {
    "job_cancel_queued": CANCEL_QUEUED.sources,
    "job_request_cancel_running": HELD,
    "job_resolve": RESOLVE.sources,
    "job_settle_overdue_running": EXPIRE_LEASE.sources,
    "job_settle_overdue_queued": EXPIRE_QUEUED.sources,
    "job_settle_abandoned": EXPIRE_LEASE.sources,
    "jobs_expired": PRUNABLE,
    "jobs_expired_after": PRUNABLE,
    "jobs_delete_expired": PRUNABLE,
}


def states_named(sql: str) -> set[str]:
    """The states a statement's WHERE clause names as literals (`state = 'x'`, `state IN ('x', 'y')`)."""
    where = sql.split("WHERE", 1)[1]
    named = set(re.findall(r"(?<![.\w])state = '(\w+)'", where))
    for listed in re.findall(r"(?<![.\w])state IN \(('[^)]*)\)", where):
        named |= set(re.findall(r"'(\w+)'", listed))
    return named


@pytest.mark.parametrize("driver", drivers.DRIVERS)
@pytest.mark.parametrize("name", FROM_STATES)
def test_a_statement_takes_jobs_from_the_states_of_its_move(driver: str, name: str) -> None:
    sql = drivers.named(driver).statement(name).sql
    assert states_named(sql) == {state.value for state in FROM_STATES[name]}

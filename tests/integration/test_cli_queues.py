"""`consumer --queues` and `worker --queues` that cannot be run say why in one line and exit 2 (a usage
error), before they touch the store or the broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import make_settings
from tests.support import procs

# The store named is never made: the option is refused first.
pytestmark = pytest.mark.databases("sqlite")


@pytest.mark.parametrize(
    ("command", "spec", "said"),
    [
        ("consumer", "fast,Slow=2", "--queues: 'Slow' is not a queue name (1 to 64 characters of a-z"),
        ("consumer", "fast=0", "--queues: 'fast=0': the number of threads must be a whole number above 0"),
        ("worker", "fast,slow,fast", "--queues: queue 'fast' is named twice"),
        (
            "consumer",
            "dead",
            "--queues: queue 'dead' would be the dead-letter queue 'jobs-q.dead': rename it",
        ),
    ],
)
def test_a_queues_option_that_cannot_be_run_is_refused_in_one_line_with_exit_2(
    tmp_path: Path, command: str, spec: str, said: str
) -> None:
    store = tmp_path / "jobs.db"
    settings = make_settings(
        tmp_path, database_url=f"sqlite:///{store}", queue="jobs-q", dead_letter_queue="jobs-q.dead"
    )

    result = procs.run([command, "--queues", spec], settings)

    told = (result.stdout + result.stderr).strip()
    assert result.returncode == 2, told
    assert told.startswith(f"outbox-bridge: {said}"), told
    assert len(told.splitlines()) == 1, told
    assert not store.exists()

"""A baseline worker killed mid-job: once its lease runs out, another worker runs the job again under a
higher epoch, and the killed attempt stays on record as lost."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, queries
from outbox_bridge.jobstore.states import State
from tests.conftest import make_settings
from tests.support.procs import Proc, start, wait_for
from tests.support.store import job_row, new_job

pytestmark = pytest.mark.slow

SLEEP_SECONDS = 2.0


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """A short lease and frequent sweeps, so a dead worker's job comes back within a second or two."""
    return make_settings(tmp_path, lease_seconds=1.0, sweep_interval_seconds=0.2)


def executions(settings: Settings) -> list[dict[str, Any]]:
    log = settings.execution_log
    assert log is not None
    lines = log.read_text().splitlines() if log.exists() else []
    return [entry for entry in map(json.loads, lines) if entry["event"] == "start"]


@pytest.mark.timeout(90)
def test_job_of_a_killed_worker_is_finished_by_another_under_a_higher_epoch(
    settings: Settings, engine: Engine, tmp_path: Path
) -> None:
    job_id = new_job(engine, "sleep-1", kind="sleep", payload={"seconds": SLEEP_SECONDS})
    procs: list[Proc] = []
    try:
        first = start(["worker"], settings, tmp_path / "logs", "first")
        procs.append(first)
        wait_for(lambda: len(executions(settings)) == 1, 30, what="the first worker to start the job")
        first.signal(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
        assert job_row(engine, job_id).state is State.RUNNING

        second = start(["worker"], settings, tmp_path / "logs", "second")
        procs.append(second)
        wait_for(lambda: job_row(engine, job_id).state is State.SUCCEEDED, 30, what="the job to succeed")
        assert second.terminate(30) == 0
    finally:
        for proc in procs:
            if proc.alive():
                proc.kill()

    job = job_row(engine, job_id)
    assert (job.state, job.epoch, job.attempts) == (State.SUCCEEDED, 2, 2)
    tries = db.read(engine, queries.attempts_of, job_id)
    assert [(a.epoch, a.outcome) for a in tries] == [(1, "lost"), (2, "succeeded")]
    assert tries[0].worker.endswith(f":{first.pid}")
    assert tries[1].worker.endswith(f":{second.pid}")
    assert job.result_attempt_id == tries[1].id
    assert [(e["epoch"], e["pid"]) for e in executions(settings)] == [(1, first.pid), (2, second.pid)]
    assert "Traceback" not in second.log_path.read_text()

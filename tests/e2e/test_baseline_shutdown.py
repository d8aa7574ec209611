"""SIGTERM and SIGINT stop a baseline worker cleanly: it takes no new job, lets a running job finish within
the grace period, gives back what is still running after it, and exits 0 with no job left `running`."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, queries
from outbox_bridge.jobstore.states import State
from tests.conftest import make_settings
from tests.support.procs import Proc, start, wait_for
from tests.support.store import job_row, new_job

pytestmark = pytest.mark.slow

GRACE_SECONDS = 0.5


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """The baseline is the SQLite-only design: it always runs on a SQLite file of its own."""
    return make_settings(tmp_path)


def started(settings: Settings) -> list[str]:
    log = settings.execution_log
    assert log is not None
    lines = log.read_text().splitlines() if log.exists() else []
    return [entry["job_id"] for entry in map(json.loads, lines) if entry["event"] == "start"]


def start_worker_running(settings: Settings, tmp_path: Path, job_id: str) -> Proc:
    worker = start(["worker"], settings, tmp_path / "logs", "worker")
    try:
        wait_for(lambda: job_id in started(settings), 30, what="the worker to start the job")
    except AssertionError:
        worker.kill()
        raise
    return worker


def stop(worker: Proc, sig: signal.Signals, timeout: float) -> tuple[int, float]:
    """Send `sig`; returns the exit code and how long the process took to exit."""
    sent = time.monotonic()
    worker.signal(sig)
    try:
        code = worker.wait(timeout)
    finally:
        if worker.alive():
            worker.kill()
    return code, time.monotonic() - sent


@pytest.mark.timeout(60)
def test_sigterm_lets_the_running_job_finish_and_claims_nothing_more(
    settings: Settings, engine: Engine, tmp_path: Path
) -> None:
    assert settings.shutdown_grace_seconds >= 20
    running = new_job(engine, "sleep", kind="sleep", payload={"seconds": 2.5})
    worker = start_worker_running(settings, tmp_path, running)
    waiting = new_job(engine, "noop", kind="noop", payload={})

    code, _ = stop(worker, signal.SIGTERM, 30)

    assert code == 0
    assert job_row(engine, running).state is State.SUCCEEDED
    assert (job_row(engine, waiting).state, job_row(engine, waiting).epoch) == (State.QUEUED, 0)
    assert started(settings) == [running]
    output = worker.log_path.read_text()
    assert "SIGTERM received" in output
    assert "stopped: 1 job(s) run (succeeded=1); exit 0" in output


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_job_still_running_after_the_grace_period_is_released_uncounted(
    settings: Settings, engine: Engine, tmp_path: Path, sig: signal.Signals
) -> None:
    settings = settings.model_copy(update={"shutdown_grace_seconds": GRACE_SECONDS})
    job_id = new_job(engine, "long-sleep", kind="sleep", payload={"seconds": 60})
    worker = start_worker_running(settings, tmp_path, job_id)

    code, took = stop(worker, sig, 20)

    assert code == 0
    assert took < 10, f"the worker took {took:.1f}s to stop; it should not wait for the 60s job"
    released = job_row(engine, job_id)
    assert (released.state, released.attempts, released.epoch) == (State.QUEUED, 0, 1)
    assert released.lease_owner is None
    assert [a.outcome for a in db.read(engine, queries.attempts_of, job_id)] == ["released"]
    assert db.read(engine, queries.counts_by_state)["running"] == 0
    output = worker.log_path.read_text()
    assert f"{sig.name} received" in output
    assert f"job {job_id} epoch 1: released" in output
    assert "stopped: 1 job(s) run (released=1); exit 0" in output


@pytest.mark.timeout(60)
def test_a_second_signal_cuts_the_grace_period_short(
    settings: Settings, engine: Engine, tmp_path: Path
) -> None:
    assert settings.shutdown_grace_seconds >= 20
    job_id = new_job(engine, "long-sleep", kind="sleep", payload={"seconds": 60})
    worker = start_worker_running(settings, tmp_path, job_id)
    worker.signal(signal.SIGTERM)
    wait_for(lambda: "stopping: no new claims" in worker.output(), 10, what="the worker to start stopping")

    code, took = stop(worker, signal.SIGTERM, 15)

    assert code == 0
    assert took < 10, f"the worker took {took:.1f}s after the second signal; it should cut the grace short"
    assert (job_row(engine, job_id).state, job_row(engine, job_id).attempts) == (State.QUEUED, 0)

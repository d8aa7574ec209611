"""A real process started with LOG_FORMAT=json writes nothing but JSON lines on stderr, its job events
among them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from core.settings import Settings
from jobstore import db, queries
from jobstore.states import State
from tests.conftest import make_settings
from tests.support.procs import start, wait_for
from tests.support.store import new_job

SECRET = "payload-value-c40b"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """The baseline worker (the cheapest process that runs jobs) runs on a SQLite file of its own."""
    return make_settings(tmp_path)


def state_of(engine: Engine, job_id: str) -> State | None:
    job = db.read(engine, queries.get_job, job_id)
    return None if job is None else job.state


@pytest.mark.databases("sqlite")
@pytest.mark.timeout(60)
def test_a_worker_under_log_format_json_writes_one_json_object_per_line(
    settings: Settings, engine: Engine, tmp_path: Path
) -> None:
    job_id = new_job(engine, tenant="acme", kind="noop", payload={"s": SECRET})
    worker = start(["worker"], settings, tmp_path / "logs", "worker", LOG_FORMAT="json")
    try:
        wait_for(lambda: state_of(engine, job_id) is State.SUCCEEDED, 30, 0.1, "the job to succeed")
        assert worker.terminate(30) == 0
    finally:
        if worker.alive():
            worker.kill()

    output = worker.output()
    lines: list[dict[str, Any]] = [json.loads(line) for line in output.splitlines() if line.strip()]
    assert lines, "the worker wrote nothing"
    assert all({"ts", "level", "logger", "message"} <= line.keys() for line in lines)
    assert {line["role"] for line in lines} == {"worker"}
    assert {line["pid"] for line in lines} == {worker.pid}
    events = [(e["event"], e["tenant"], e["kind"]) for e in lines if e.get("job_id") == job_id]
    assert events == [("claimed", "acme", "noop"), ("succeeded", "acme", "noop")]
    assert SECRET not in output

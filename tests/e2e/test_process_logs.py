"""A real process started with LOG_FORMAT=json writes nothing but JSON lines on stderr, its job events
among them, and the api's access log when `--access-log` asks for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, queries
from outbox_bridge.jobstore.states import State
from tests.conftest import make_settings
from tests.support.procs import Proc, free_port, start, wait_for, wait_http
from tests.support.store import new_job

SECRET = "payload-value-c40b"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """The baseline worker (the cheapest process that runs jobs) runs on a SQLite file of its own."""
    return make_settings(tmp_path)


def json_lines(proc: Proc) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in proc.output().splitlines() if line.strip()]
    assert lines, "the process wrote nothing"
    assert all({"ts", "level", "logger", "message"} <= line.keys() for line in lines)
    assert {line["pid"] for line in lines} == {proc.pid}
    return lines


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

    lines = json_lines(worker)
    assert {line["role"] for line in lines} == {"worker"}
    events = [(e["event"], e["tenant"], e["kind"]) for e in lines if e.get("job_id") == job_id]
    assert events == [("claimed", "acme", "noop"), ("succeeded", "acme", "noop")]
    assert SECRET not in worker.output()


@pytest.mark.databases("sqlite")
@pytest.mark.timeout(60)
def test_the_api_with_access_log_logs_each_request_and_its_accepted_jobs_as_json(
    settings: Settings, engine: Engine, tmp_path: Path
) -> None:
    base = f"http://127.0.0.1:{free_port()}"
    api = start(["api", "--port", base.rsplit(":", 1)[1], "--access-log"], settings, tmp_path / "logs", "api",
                LOG_FORMAT="json")  # fmt: skip
    try:
        wait_http(f"{base}/healthz", api, timeout=30)
        token = issue_token(settings.auth_secret, tenant="acme", user="alice")
        answer = httpx.post(
            f"{base}/jobs?note={SECRET}",
            json={"kind": "noop", "payload": {"s": SECRET}},
            headers={"Authorization": f"Bearer {token}", "Idempotency-Key": "a"},
        )
        assert answer.status_code == 202
        assert api.terminate(30) == 0
    finally:
        if api.alive():
            api.kill()

    lines = json_lines(api)
    [accepted] = [line for line in lines if line.get("event") == "accepted"]
    assert (accepted["job_id"], accepted["tenant"], accepted["role"]) == (answer.json()["id"], "acme", "api")
    access = [line for line in lines if line["logger"] == "outbox_bridge.access"]
    assert {"method": "POST", "path": "/jobs", "status": 202}.items() <= access[-1].items()
    assert SECRET not in api.output()

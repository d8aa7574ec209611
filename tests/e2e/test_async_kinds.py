"""A team's `async def` kind and its kinds that return nothing, in a kinds module of its own named by
OUTBOX_BRIDGE_KINDS, run to `succeeded` through the real processes: the api, the relay and a consumer (the
broker path), or a baseline worker. The coroutine checkpoints, checks for a cancel, reads its deadline and
marks its effect; a kind's None is the result `null`. A worker stopped by SIGTERM lets a running coroutine
finish, or gives it back after the grace period, as it does a function's job."""

from __future__ import annotations

import json
import signal
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import outbox_bridge
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, migrate, queries
from outbox_bridge.jobstore.states import State
from tests.conftest import make_settings
from tests.support import procs
from tests.support.store import job_row, new_job

pytestmark = pytest.mark.slow

TEAM_KINDS = '''
"""The team's kinds, written the Celery way: a coroutine, and tasks that return nothing."""
import asyncio

from pydantic import BaseModel, ConfigDict, Field

import outbox_bridge


class Fetch(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    pages: int = Field(ge=1, le=1000)
    pause: float = 0.0


@outbox_bridge.kind("fetch_pages", payload=Fetch)
async def fetch_pages(ctx: outbox_bridge.JobContext, payload: Fetch) -> dict:
    done = 0
    for _ in range(payload.pages):
        ctx.check_cancel()
        await asyncio.sleep(payload.pause)
        done += 1
        ctx.save_checkpoint({"done": done})
    ctx.mark_external_started()
    return {"pages": done, "tenant": ctx.tenant, "has_deadline": ctx.remaining_seconds() is not None}


class Ping(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    to: str


@outbox_bridge.kind("ping", payload=Ping)
def ping(ctx: outbox_bridge.JobContext, payload: Ping) -> None:
    ctx.check_cancel()


@outbox_bridge.kind("ping_async", payload=Ping)
async def ping_async(ctx: outbox_bridge.JobContext, payload: Ping) -> None:
    await asyncio.sleep(0)
'''


@pytest.fixture
def team(tmp_path: Path) -> Path:
    """A package of the team's own, importable only through PYTHONPATH."""
    package = tmp_path / "team" / "teamapp"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "kinds.py").write_text(textwrap.dedent(TEAM_KINDS))
    return package.parent


class Deployment:
    def __init__(self, tmp_path: Path, team: Path, **overrides: Any) -> None:
        # ALLOWED_KINDS unset: every loaded kind but the test kinds is accepted.
        self.settings = make_settings(tmp_path, allowed_kinds=None, **overrides)
        self.engine = db.make_engine(self.settings)
        migrate.init_schema(self.settings, self.engine)
        self.env = {"OUTBOX_BRIDGE_KINDS": "teamapp.kinds", "PYTHONPATH": str(team)}
        self.logs = tmp_path / "logs"
        self.procs: list[procs.Proc] = []
        self.url = ""
        self.token = issue_token(self.settings.auth_secret, tenant="acme", user="a")
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def start(self, *args: str) -> procs.Proc:
        proc = procs.start(list(args), self.settings, self.logs, args[0] + str(len(self.procs)), **self.env)
        self.procs.append(proc)
        return proc

    def api(self) -> None:
        port = procs.free_port()
        proc = self.start("api", "--port", str(port))
        self.url = f"http://127.0.0.1:{port}"
        procs.wait_http(f"{self.url}/healthz", proc, timeout=30)

    def submit(self, kind: str, payload: dict[str, Any], **fields: Any) -> str:
        headers = {**self.headers, "Idempotency-Key": uuid.uuid4().hex}
        body = {"kind": kind, "payload": payload, **fields}
        accepted = httpx.post(f"{self.url}/jobs", json=body, headers=headers, timeout=10)
        assert accepted.status_code == 202, accepted.text
        return str(accepted.json()["id"])

    def finished(self, job_id: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            view = httpx.get(f"{self.url}/jobs/{job_id}", headers=self.headers, timeout=10).json()
            if view["state"] not in {"queued", "running"}:
                return dict(view)
            time.sleep(0.05)
        raise AssertionError(f"job {job_id} did not finish; logs: {[p.output()[-800:] for p in self.procs]}")

    def result(self, job_id: str) -> httpx.Response:
        return httpx.get(f"{self.url}/jobs/{job_id}/result", headers=self.headers, timeout=10)

    def close(self) -> None:
        for proc in self.procs:
            if proc.alive():
                proc.kill()
        self.engine.dispose()


@pytest.fixture
def deployment(tmp_path: Path, team: Path, rabbitmq_url: str) -> Iterator[Deployment]:
    made = Deployment(tmp_path, team, rabbitmq_url=rabbitmq_url)
    yield made
    made.close()


@pytest.fixture
def without_broker(tmp_path: Path, team: Path) -> Iterator[Deployment]:
    made = Deployment(tmp_path, team)
    yield made
    made.close()


def check_the_team_kinds_run(deployment: Deployment) -> None:
    fetched = deployment.submit("fetch_pages", {"pages": 3}, deadline_seconds=600)
    quiet = deployment.submit("ping", {"to": "ops"})
    quiet_async = deployment.submit("ping_async", {"to": "ops"})

    view = deployment.finished(fetched)
    assert (view["state"], view["attempts"], view["error"]) == ("succeeded", 1, None), view
    assert deployment.result(fetched).json() == {"pages": 3, "tenant": "acme", "has_deadline": True}
    assert job_row(deployment.engine, fetched).checkpoint == {"done": 3}
    [attempt] = db.read(deployment.engine, queries.attempts_of, fetched)
    assert attempt.external_started_at is not None

    for job_id in (quiet, quiet_async):
        view = deployment.finished(job_id)
        assert (view["state"], view["attempts"], view["error"]) == ("succeeded", 1, None), view
        result = deployment.result(job_id)
        assert (result.status_code, result.headers["content-type"]) == (200, "application/json")
        assert result.content == b"null"
        with outbox_bridge.Client(deployment.url, token=deployment.token) as client:
            assert client.result(job_id) is None


@pytest.mark.broker
@pytest.mark.databases("sqlite")  # a null result in either store: tests/integration/test_kinds_async.py
def test_async_and_none_returning_kinds_run_through_the_api_relay_and_a_consumer(
    deployment: Deployment,
) -> None:
    deployment.api()
    deployment.start("relay")
    deployment.start("consumer", "--concurrency", "2")
    check_the_team_kinds_run(deployment)


@pytest.mark.databases("sqlite")
def test_async_and_none_returning_kinds_run_through_the_api_and_a_baseline_worker(
    without_broker: Deployment,
) -> None:
    deployment = without_broker
    deployment.api()
    deployment.start("worker", "--concurrency", "2")
    check_the_team_kinds_run(deployment)
    listed = procs.run(["kinds", "--json"], deployment.settings, **deployment.env)
    kinds = {kind["name"]: kind for kind in json.loads(listed.stdout)["kinds"]}
    assert kinds["fetch_pages"]["accepted"] and kinds["fetch_pages"]["payload_schema"]["required"] == [
        "pages"
    ]


def started(settings: Settings) -> list[str]:
    log = settings.execution_log
    assert log is not None
    lines = log.read_text().splitlines() if log.exists() else []
    return [entry["job_id"] for entry in map(json.loads, lines) if entry["event"] == "start"]


@pytest.mark.timeout(60)
@pytest.mark.databases("sqlite")
@pytest.mark.parametrize(("grace", "pages", "state"), [(20.0, 15, State.SUCCEEDED), (0.5, 600, State.QUEUED)])
def test_sigterm_lets_a_running_coroutine_finish_or_gives_it_back_after_the_grace_period(
    tmp_path: Path, team: Path, grace: float, pages: int, state: State
) -> None:
    deployment = Deployment(tmp_path, team, shutdown_grace_seconds=grace)
    try:
        job_id = new_job(deployment.engine, "k", kind="fetch_pages", payload={"pages": pages, "pause": 0.1})
        worker = deployment.start("worker")
        procs.wait_for(lambda: job_id in started(deployment.settings), 30, what="the worker to start the job")
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        job = job_row(deployment.engine, job_id)
        assert (job.state, job.lease_owner) == (state, None)
        outcomes = [a.outcome for a in db.read(deployment.engine, queries.attempts_of, job_id)]
        assert outcomes == (["succeeded"] if state is State.SUCCEEDED else ["released"])
        assert job.attempts == (1 if state is State.SUCCEEDED else 0)
    finally:
        deployment.close()

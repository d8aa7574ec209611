"""A team's own kind, defined in a package of its own outside this repository with `outbox_bridge.kind` and
named by OUTBOX_BRIDGE_KINDS, runs as the built-in kinds do: accepted by the api with its payload checked and
documented, run by a consumer (the broker path) or a baseline worker. A kinds module that does not import
stops each process at start with one line that names it."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine

import outbox_bridge
from outbox_bridge import enqueuing
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, migrate
from tests.conftest import make_settings
from tests.support import procs

pytestmark = pytest.mark.slow

TEAM_KINDS = '''
"""The team's kinds: nothing here is part of outbox-bridge."""
from pydantic import BaseModel, ConfigDict, Field

import outbox_bridge


class ResizeImage(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    width: int = Field(ge=1, le=10_000)
    height: int = Field(ge=1, le=10_000)


@outbox_bridge.kind("resize_image", payload=ResizeImage)
def resize(ctx: outbox_bridge.JobContext, payload: ResizeImage) -> dict:
    if payload.width == 13:
        raise outbox_bridge.PermanentError("unlucky", "13 pixels wide is not supported")
    # Any keys at all: a `path` is only a key here (a file result is named with ctx.result_file).
    return {"area": payload.width * payload.height, "tenant": ctx.tenant, "path": "not/a/file"}
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
        # ALLOWED_KINDS unset (unless `overrides` says): every loaded kind but the built-in test and example
        # kinds is accepted.
        self.settings = make_settings(tmp_path, **{"allowed_kinds": None, **overrides})
        engine = db.make_engine(self.settings)
        migrate.init_schema(self.settings, engine)
        engine.dispose()
        self.env = {"OUTBOX_BRIDGE_KINDS": "teamapp.kinds", "PYTHONPATH": str(team)}
        self.logs = tmp_path / "logs"
        self.procs: list[procs.Proc] = []
        self.url = ""
        self.token = issue_token(self.settings.auth_secret, tenant="acme", user="ann")

    def start(self, *args: str) -> procs.Proc:
        proc = procs.start(list(args), self.settings, self.logs, args[0] + str(len(self.procs)), **self.env)
        self.procs.append(proc)
        return proc

    def api(self) -> None:
        port = procs.free_port()
        proc = self.start("api", "--port", str(port))
        self.url = f"http://127.0.0.1:{port}"
        procs.wait_http(f"{self.url}/healthz", proc, timeout=30)

    def submit(self, payload: dict[str, Any], key: str, kind: str = "resize_image") -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}", "Idempotency-Key": key}
        return httpx.post(
            f"{self.url}/jobs", json={"kind": kind, "payload": payload}, headers=headers, timeout=10
        )

    def finished(self, job_id: str, timeout: float = 30) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token}"}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            view = httpx.get(f"{self.url}/jobs/{job_id}", headers=headers, timeout=10).json()
            if view["state"] not in {"queued", "running"}:
                return dict(view)
            time.sleep(0.05)
        raise AssertionError(f"job {job_id} did not finish; logs: {[p.output()[-800:] for p in self.procs]}")

    def result(self, job_id: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.get(f"{self.url}/jobs/{job_id}/result", headers=headers, timeout=10)

    def close(self) -> None:
        for proc in self.procs:
            if proc.alive():
                proc.kill()


@pytest.fixture
def deployment(tmp_path: Path, team: Path, rabbitmq_url: str) -> Iterator[Deployment]:
    made = Deployment(tmp_path, team, rabbitmq_url=rabbitmq_url)
    yield made
    made.close()


def check_the_team_kind_runs(deployment: Deployment) -> None:
    accepted = deployment.submit({"width": 4, "height": 5}, "k-1")
    assert accepted.status_code == 202, accepted.text
    view = deployment.finished(accepted.json()["id"])
    assert view["state"] == "succeeded", view
    result = deployment.result(view["id"])
    assert result.headers["content-type"] == "application/json"
    assert result.json() == {"area": 20, "tenant": "acme", "path": "not/a/file"}

    refused = deployment.submit({"width": "4", "height": 5}, "k-2")
    assert refused.status_code == 400 and refused.json()["type"].endswith(":invalid-payload")
    failed = deployment.submit({"width": 13, "height": 1}, "k-3")
    assert deployment.finished(failed.json()["id"])["error"]["code"] == "unlucky"
    # The built-in test and example kinds are not accepted without a development setup or ALLOWED_KINDS
    # naming them.
    assert deployment.submit({}, "k-4", kind="noop").status_code == 400
    assert deployment.submit({"rows": 1, "chunk": 1}, "k-5", kind="export").status_code == 400


@pytest.mark.broker
def test_a_team_kind_runs_through_the_api_relay_and_a_consumer(deployment: Deployment) -> None:
    deployment.api()
    deployment.start("relay")
    deployment.start("consumer", "--concurrency", "2")
    check_the_team_kind_runs(deployment)
    document = httpx.get(f"{deployment.url}/openapi.json", timeout=10).json()
    payload = document["components"]["schemas"]["Payload_resize_image"]
    assert set(payload["required"]) == {"width", "height"}


@pytest.mark.databases("sqlite")
def test_a_team_kind_runs_through_the_api_and_a_baseline_worker(deployment: Deployment) -> None:
    deployment.api()
    deployment.start("worker", "--concurrency", "2")
    check_the_team_kind_runs(deployment)


@pytest.mark.databases("sqlite")
@pytest.mark.parametrize("command", [["api", "--port", "0"], ["consumer"], ["worker"], ["kinds"]])
def test_a_kinds_module_that_does_not_import_stops_the_process_in_one_line(
    tmp_path: Path, team: Path, command: list[str]
) -> None:
    (team / "teamapp" / "broken.py").write_text("import teamapp.not_written_yet\n")
    settings: Settings = make_settings(tmp_path, allowed_kinds=None)
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    engine.dispose()
    done = procs.run(command, settings, OUTBOX_BRIDGE_KINDS="teamapp.broken", PYTHONPATH=str(team))
    assert done.returncode == 1
    said = done.stderr.strip().splitlines()
    assert len(said) == 1, done.stderr
    assert "'teamapp.broken'" in said[0] and "teamapp.not_written_yet" in said[0]


@pytest.mark.broker
def test_a_job_enqueued_in_the_applications_own_transaction_runs_once_it_commits(
    tmp_path: Path, team: Path, rabbitmq_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A deployment that names the built-in export kind, for its processes and for `enqueue` here.
    monkeypatch.setenv("ALLOWED_KINDS", "export,resize_image")
    enqueuing._settings.cache_clear()
    deployment = Deployment(
        tmp_path, team, rabbitmq_url=rabbitmq_url, allowed_kinds=("export", "resize_image")
    )
    try:
        enqueue_and_run(deployment)
    finally:
        deployment.close()
        enqueuing._settings.cache_clear()


def enqueue_and_run(deployment: Deployment) -> None:
    deployment.start("relay")
    deployment.start("consumer", "--concurrency", "2")
    deployment.api()
    own = create_engine(deployment.settings.database_url)  # the application's engine, not the store's
    try:
        with own.begin() as conn:
            rolled_back = conn.begin_nested()
            outbox_bridge.enqueue(
                conn, "export", {"rows": 5, "chunk": 5}, key="gone", tenant="acme", owner="a"
            )
            rolled_back.rollback()
            job = outbox_bridge.enqueue(
                conn, "export", {"rows": 5, "chunk": 5}, key="k", tenant="acme", owner="a"
            )
        view = deployment.finished(job.id)
        assert view["state"] == "succeeded", view
        assert deployment.result(job.id).text.count("\n") == 6  # the header and five rows
    finally:
        own.dispose()

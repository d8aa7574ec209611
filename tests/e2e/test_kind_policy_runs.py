"""A team's kinds that snooze, time out and back off in their own way, in a kinds module of their own named by
OUTBOX_BRIDGE_KINDS, run through the real processes: the api, the relay and a consumer (the broker path), or
a baseline worker.

A kind that snoozes once then succeeds ends with one attempt spent and one snooze; one that always snoozes,
with MAX_SNOOZES=2, ends as a failure. A function or a coroutine still running past its kind's
`timeout_seconds` ends its attempt with `timeout`, and the one thread of the process then runs the next job
while the stuck kind's 30 s are far from over. A kind's own backoff sets its retry's wait."""

from __future__ import annotations

import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from outbox_bridge.api.auth import issue_token
from outbox_bridge.jobstore import db, migrate, queries
from outbox_bridge.jobstore.records import Attempt
from tests.conftest import make_settings
from tests.support import procs
from tests.support.store import job_row

# The store's side of each (the snooze's write, a retry's backoff, a timed-out attempt's failure) is tested on
# both stores (tests/integration/test_store_snooze.py, test_store_fencing.py); here the processes, on SQLite.
pytestmark = [pytest.mark.slow, pytest.mark.databases("sqlite")]

TEAM_KINDS = '''
"""The team's kinds: they snooze, time out and back off as their policy says."""
import asyncio
import threading
import time

from pydantic import BaseModel, ConfigDict

import outbox_bridge


class Nothing(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


@outbox_bridge.kind("snooze_once", payload=Nothing)
def snooze_once(ctx: outbox_bridge.JobContext, payload: Nothing) -> dict:
    if ctx.checkpoint is None:
        ctx.save_checkpoint({"snoozed": True})
        raise outbox_bridge.Snooze(1)
    return {"attempts": ctx.attempts}


@outbox_bridge.kind("snooze_always", payload=Nothing, max_attempts=1)
async def snooze_always(ctx: outbox_bridge.JobContext, payload: Nothing) -> dict:
    await asyncio.sleep(0)
    raise outbox_bridge.Snooze(0.2)


@outbox_bridge.kind("own_backoff", payload=Nothing, max_attempts=2, backoff=(2.0, 2.0))
def own_backoff(ctx: outbox_bridge.JobContext, payload: Nothing) -> dict:
    raise outbox_bridge.TransientError("flaky", "not yet")


@outbox_bridge.kind("stuck", payload=Nothing, timeout_seconds=1, max_attempts=1)
def stuck(ctx: outbox_bridge.JobContext, payload: Nothing) -> dict:
    ctx.save_checkpoint({"thread": threading.current_thread().name})
    until = time.monotonic() + 30
    while time.monotonic() < until:
        try:
            time.sleep(0.05)
        except Exception:  # a kind's own error handling does not keep it past its timeout
            pass
    return {"slept": 30}


@outbox_bridge.kind("stuck_async", payload=Nothing, timeout_seconds=1, max_attempts=1)
async def stuck_async(ctx: outbox_bridge.JobContext, payload: Nothing) -> dict:
    ctx.save_checkpoint({"thread": threading.current_thread().name})
    await asyncio.sleep(30)
    return {"slept": 30}


@outbox_bridge.kind("which_thread", payload=Nothing)
def which_thread(ctx: outbox_bridge.JobContext, payload: Nothing) -> dict:
    return {"thread": threading.current_thread().name}
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
        self.settings = make_settings(tmp_path, allowed_kinds=None, max_snoozes=2, **overrides)
        self.engine = db.make_engine(self.settings)
        migrate.init_schema(self.settings, self.engine)
        self.env = {"OUTBOX_BRIDGE_KINDS": "teamapp.kinds", "PYTHONPATH": str(team)}
        self.logs = tmp_path / "logs"
        self.procs: list[procs.Proc] = []
        self.url = ""
        token = issue_token(self.settings.auth_secret, tenant="acme", user="a")
        self.headers = {"Authorization": f"Bearer {token}"}

    def start(self, *args: str) -> None:
        name = args[0] + str(len(self.procs))
        self.procs.append(procs.start(list(args), self.settings, self.logs, name, **self.env))

    def run(self, mode: str) -> None:
        """The api, and the relay and a consumer (`consumer`) or a baseline worker (`worker`), one thread."""
        port = procs.free_port()
        self.start("api", "--port", str(port))
        self.url = f"http://127.0.0.1:{port}"
        procs.wait_http(f"{self.url}/healthz", self.procs[-1], timeout=30)
        if mode == "consumer":
            self.start("relay")
        self.start(mode, "--concurrency", "1")

    def submit(self, kind: str) -> str:
        headers = {**self.headers, "Idempotency-Key": uuid.uuid4().hex}
        accepted = httpx.post(
            f"{self.url}/jobs", json={"kind": kind, "payload": {}}, headers=headers, timeout=10
        )
        assert accepted.status_code == 202, accepted.text
        return str(accepted.json()["id"])

    def view(self, job_id: str) -> dict[str, Any]:
        return dict(httpx.get(f"{self.url}/jobs/{job_id}", headers=self.headers, timeout=10).json())

    def finished(self, job_id: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            view = self.view(job_id)
            if view["state"] not in {"queued", "running"}:
                return view
            time.sleep(0.05)
        raise AssertionError(f"job {job_id} did not finish; logs: {[p.output()[-800:] for p in self.procs]}")

    def result(self, job_id: str) -> Any:
        return httpx.get(f"{self.url}/jobs/{job_id}/result", headers=self.headers, timeout=10).json()

    def attempts(self, job_id: str) -> list[Attempt]:
        return list(db.read(self.engine, queries.attempts_of, job_id))

    def close(self) -> None:
        for proc in self.procs:
            if proc.alive():
                proc.kill()
        self.engine.dispose()


@pytest.fixture(params=[pytest.param("consumer", marks=pytest.mark.broker), "worker"])
def deployment(request: pytest.FixtureRequest, tmp_path: Path, team: Path) -> Iterator[Deployment]:
    """A deployment running the team's kinds on one thread: through the broker (a consumer), or a
    baseline worker."""
    mode = request.param
    if mode == "consumer":
        made = Deployment(tmp_path, team, rabbitmq_url=request.getfixturevalue("rabbitmq_url"))
    else:
        made = Deployment(tmp_path, team)
    made.run(mode)
    yield made
    made.close()


def test_a_snooze_spends_no_attempt_and_too_many_snoozes_fail(deployment: Deployment) -> None:
    once = deployment.submit("snooze_once")
    always = deployment.submit("snooze_always")

    view = deployment.finished(once)
    assert (view["state"], view["attempts"], view["error"]) == ("succeeded", 1, None), view
    assert deployment.result(once) == {"attempts": 1}
    assert job_row(deployment.engine, once).snoozes == 1
    snoozed, succeeded = deployment.attempts(once)
    assert (snoozed.outcome, succeeded.outcome) == ("snoozed", "succeeded")
    assert succeeded.started_at >= snoozed.ended_at + 1.0  # due again 1 s after the snooze, not before

    view = deployment.finished(always)
    assert (view["state"], view["attempts"], view["error"]["code"]) == ("dead", 1, "attempts_exhausted")
    assert job_row(deployment.engine, always).snoozes == 2
    outcomes = [(a.outcome, a.error_code) for a in deployment.attempts(always)]
    assert outcomes == [("snoozed", None), ("snoozed", None), ("dead", "snoozed_too_often")]


def test_a_kinds_own_backoff_sets_its_retrys_wait(deployment: Deployment) -> None:
    job_id = deployment.submit("own_backoff")
    view = deployment.finished(job_id)
    assert (view["state"], view["attempts"]) == ("dead", 2), view
    first, second = deployment.attempts(job_id)
    # The retry came due between half and all of the kind's 2 s base after the first attempt ended (the
    # deployment's own backoff is 0.05 s to 0.5 s), and the second attempt started no sooner.
    assert first.ended_at is not None
    assert 1.0 <= job_row(deployment.engine, job_id).available_at - first.ended_at <= 2.0
    assert second.started_at >= first.ended_at + 1.0


@pytest.mark.parametrize("kind", ["stuck", "stuck_async"])
def test_an_attempt_past_its_timeout_ends_and_its_thread_runs_the_next_job(
    deployment: Deployment, kind: str
) -> None:
    stuck = deployment.submit(kind)
    procs.wait_for(lambda: deployment.view(stuck)["state"] == "running", 30, what="the stuck job to start")
    after = deployment.submit("which_thread")

    view = deployment.finished(stuck)
    assert (view["state"], view["attempts"], view["error"]["code"]) == ("dead", 1, "attempts_exhausted")
    [attempt] = deployment.attempts(stuck)
    assert (attempt.outcome, attempt.error_code) == ("dead", "timeout")

    view = deployment.finished(after)
    assert view["state"] == "succeeded", view
    thread = job_row(deployment.engine, stuck).checkpoint
    assert thread is not None and deployment.result(after) == {"thread": thread["thread"]}
    [next_attempt] = deployment.attempts(after)
    assert next_attempt.ended_at is not None
    assert next_attempt.ended_at < attempt.started_at + 30  # long before the stuck kind would have returned

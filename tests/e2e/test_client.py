"""`outbox_bridge.Client` and `AsyncClient` against a real `outbox-bridge api` and a baseline worker: every
method, the typed errors, and a submit begun while the api is down that succeeds, once, when it comes up."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest

import outbox_bridge
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, migrate
from tests.conftest import make_settings
from tests.support import procs
from tests.support.store import every_row

pytestmark = [pytest.mark.slow, pytest.mark.databases("sqlite")]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[Settings, object]]:
    settings = make_settings(tmp_path)
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    yield settings, engine
    engine.dispose()


def start_api(settings: Settings, tmp_path: Path, started: list[procs.Proc], port: int) -> procs.Proc:
    proc = procs.start(["api", "--port", str(port)], settings, tmp_path / "logs", f"api-{len(started)}")
    started.append(proc)
    procs.wait_http(f"http://127.0.0.1:{port}/healthz", proc, timeout=30)
    return proc


def test_every_method_against_a_real_api_and_worker(
    store: tuple[Settings, object], tmp_path: Path, started: list[procs.Proc]
) -> None:
    settings, _ = store
    port = procs.free_port()
    start_api(settings, tmp_path, started, port)
    started.append(procs.start(["worker", "--concurrency", "2"], settings, tmp_path / "logs", "worker"))
    token = issue_token(settings.auth_secret, tenant="acme", user="ann")
    with outbox_bridge.Client(f"http://127.0.0.1:{port}", token=token) as jobs:
        job = jobs.submit("export", {"rows": 3, "chunk": 2}, key="e-1")
        assert jobs.submit("export", {"rows": 3, "chunk": 2}, key="e-1").id == job.id
        done = jobs.wait(job.id, timeout=30)
        assert done.state == "succeeded" and done.result_url
        assert jobs.result(job.id).count(b"\n") == 4  # a file result: its bytes
        waiting = jobs.submit("sleep", {"seconds": 1}, delay_seconds=60)
        assert jobs.cancel(waiting.id).state == "cancelled"
        assert {j.id for j in jobs.list()} == {job.id, waiting.id}
        assert [j.id for j in jobs.list(state="cancelled")] == [waiting.id]
        with pytest.raises(outbox_bridge.Conflict) as conflict:
            jobs.submit("export", {"rows": 4, "chunk": 2}, key="e-1")
        assert conflict.value.job_id == job.id
        with pytest.raises(outbox_bridge.BadRequest):
            jobs.submit("export", {"rows": "many"})
        with pytest.raises(outbox_bridge.NotFound):
            jobs.get("00000000-0000-0000-0000-000000000000")
        with pytest.raises(TimeoutError):
            jobs.wait(jobs.submit("sleep", {"seconds": 30}).id, timeout=0.3)
    with outbox_bridge.Client(f"http://127.0.0.1:{port}", token="not-a-token") as stranger:
        with pytest.raises(outbox_bridge.Unauthorized):
            stranger.get(job.id)

    async def read_async() -> list[str]:
        async with outbox_bridge.AsyncClient(f"http://127.0.0.1:{port}", token=token) as jobs:
            again = await jobs.wait(job.id, timeout=10)
            return [again.state] + [j.id async for j in jobs.list(state="succeeded")]

    assert asyncio.run(read_async()) == ["succeeded", job.id]
    other = issue_token(settings.auth_secret, tenant="other", user="bo")
    with outbox_bridge.Client(f"http://127.0.0.1:{port}", token=other) as jobs:
        ok = jobs.wait(jobs.submit("noop", {}).id, timeout=30)
        assert jobs.result(ok.id) == {"ok": True}  # a JSON result: its value


def test_a_submit_while_the_api_is_down_succeeds_once_it_is_up_as_one_job(
    store: tuple[Settings, object], tmp_path: Path, started: list[procs.Proc]
) -> None:
    settings, engine = store
    port = procs.free_port()
    token = issue_token(settings.auth_secret, tenant="acme", user="ann")
    starting = threading.Thread(
        target=lambda: (time.sleep(1.0), start_api(settings, tmp_path, started, port))
    )
    starting.start()
    try:
        with outbox_bridge.Client(f"http://127.0.0.1:{port}", token=token, retries=12) as jobs:
            job = jobs.submit("export", {"rows": 1, "chunk": 1})
    finally:
        starting.join()
    assert job.state == "queued"
    assert [row["id"] for row in every_row(engine)["jobs"]] == [job.id]  # type: ignore[arg-type]


def test_a_client_of_an_api_that_is_down_raises_unavailable_once_its_retries_are_spent() -> None:
    base = f"http://127.0.0.1:{procs.free_port()}"  # nothing listens there
    with outbox_bridge.Client(base, token="t", retries=1) as jobs:
        with pytest.raises(outbox_bridge.Unavailable) as raised:
            jobs.submit("export", {"rows": 1, "chunk": 1})
    assert raised.value.status == 503 and base in raised.value.detail

    async def get() -> None:
        async with outbox_bridge.AsyncClient(base, token="t", retries=1) as jobs:
            await jobs.get("j-1")

    with pytest.raises(outbox_bridge.Unavailable):
        asyncio.run(get())


def test_a_token_callable_is_called_again_once_its_short_lived_token_expires(
    store: tuple[Settings, object], tmp_path: Path, started: list[procs.Proc]
) -> None:
    settings, _ = store
    port = procs.free_port()
    start_api(settings, tmp_path, started, port)
    made: list[str] = []

    def fresh_token() -> str:
        # The first token, from `token --ttl 2s`, lives two seconds (at least one: `exp` is whole seconds);
        # the next ones an hour.
        if made:
            made.append(issue_token(settings.auth_secret, tenant="acme", user="ann", ttl_seconds=3600))
            return made[-1]
        done = procs.run(["token", "--tenant", "acme", "--user", "ann", "--ttl", "2s"], settings)
        assert done.returncode == 0, done.stderr
        made.append(done.stdout.strip())
        return made[-1]

    with outbox_bridge.Client(f"http://127.0.0.1:{port}", token=fresh_token) as jobs:
        job = jobs.submit("noop", {})
        assert jobs.get(job.id).id == job.id and len(made) == 1
        expires = jwt.decode(made[0], options={"verify_signature": False})["exp"]
        procs.wait_for(lambda: time.time() > expires + 0.1, timeout=5, what="the first token to expire")
        assert jobs.get(job.id).id == job.id
        assert len(made) == 2
    with outbox_bridge.Client(f"http://127.0.0.1:{port}", token=made[0]) as expired:
        with pytest.raises(outbox_bridge.Unauthorized):
            expired.get(job.id)

"""The headers every answer carries: `nosniff` everywhere, `no-store` on the job routes and the dashboard, a
dashboard no page can frame, and export results sent as a named attachment."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.base import file_output
from outbox_bridge.jobstore import claiming, db, fenced, queries


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def auth(settings: Settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(settings.auth_secret, tenant='acme', user='alice')}"}


def submit(client: TestClient, auth: dict[str, str], kind: str, payload: dict[str, Any], key: str) -> Any:
    response = client.post(
        "/jobs", json={"kind": kind, "payload": payload}, headers={**auth, "Idempotency-Key": key}
    )
    assert response.status_code == 202
    return response.json()


def succeed(engine: Engine, clock: FakeClock, job_id: str, output: dict[str, Any]) -> None:
    taken = db.transact(engine, claiming.claim, job_id, "test-worker", clock.now(), 30.0).claim
    assert taken is not None
    db.transact(engine, fenced.complete, job_id, taken.epoch, taken.attempt_id, output, clock.now())


def answers(client: TestClient, auth: dict[str, str], engine: Engine, clock: FakeClock) -> dict[str, Any]:
    """One answer of each sort the api gives, by name."""
    job = submit(client, auth, "noop", {}, "k-1")
    succeed(engine, clock, job["id"], {"ok": True})
    big = b'{"kind": "noop", "payload": {"pad": "' + b"x" * 70_000 + b'"}}'
    secret = client.app.state.settings.auth_secret  # type: ignore[attr-defined]
    token = issue_token(secret, tenant="ops", user="o", operator=True)
    operator = {"Authorization": f"Bearer {token}"}
    return {
        "accepted": client.post(
            "/jobs", json={"kind": "noop", "payload": {}}, headers={**auth, "Idempotency-Key": "k-2"}
        ),
        "job view": client.get(f"/jobs/{job['id']}", headers=auth),
        "listing": client.get("/jobs", headers=auth),
        "cancel": client.post(f"/jobs/{job['id']}/cancel", headers=auth),
        "json result": client.get(f"/jobs/{job['id']}/result", headers=auth),
        "401": client.get("/jobs"),
        "404 job": client.get("/jobs/no-such-job", headers=auth),
        "400": client.post(
            "/jobs", json={"kind": "teleport", "payload": {}}, headers={**auth, "Idempotency-Key": "k"}
        ),
        "413": client.post("/jobs", content=big, headers={**auth, "Idempotency-Key": "k-3"}),
        "dashboard 401": client.get("/ui"),
        "dashboard login": client.get("/ui/login"),
        "healthz": client.get("/healthz"),
        "readyz": client.get("/readyz"),
        "metrics": client.get("/metrics", headers=operator),
        "openapi": client.get("/openapi.json"),
        "no route": client.get("/nowhere"),
    }


def test_every_answer_says_nosniff_and_the_private_ones_no_store(
    client: TestClient, auth: dict[str, str], engine: Engine, clock: FakeClock
) -> None:
    for name, response in answers(client, auth, engine, clock).items():
        assert response.headers["x-content-type-options"] == "nosniff", name
        private = response.url.path.startswith(("/jobs", "/ui"))
        assert (response.headers.get("cache-control") == "no-store") is private, name


def test_the_dashboard_cannot_be_framed(client: TestClient) -> None:
    for path in ("/ui", "/ui/login", "/ui/jobs/some-id"):
        response = client.get(path)
        assert response.headers["x-frame-options"] == "DENY", path
        assert response.headers["content-security-policy"] == "frame-ancestors 'none'", path


def test_an_export_result_is_an_attachment_named_after_the_job(
    client: TestClient, auth: dict[str, str], settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    job = submit(client, auth, "export", {"rows": 1, "chunk": 1}, "k-1")
    relative = f"{job['id']}/result.csv"
    (settings.results_dir / job["id"]).mkdir(parents=True, exist_ok=True)
    (settings.results_dir / relative).write_bytes(b"id\n1\n")
    succeed(engine, clock, job["id"], file_output(relative, "text/csv"))
    response = client.get(f"/jobs/{job['id']}/result", headers=auth)
    assert response.status_code == 200
    assert response.headers["content-disposition"] == f'attachment; filename="export-{job["id"]}.csv"'
    assert response.headers["cache-control"] == "no-store"
    assert response.content == b"id\n1\n"


def test_an_unexpected_error_carries_the_headers_too(
    client: TestClient, auth: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(queries, "get_job", broken)
    response = client.get("/jobs/some-id", headers=auth)
    assert response.status_code == 503
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["cache-control"] == "no-store"

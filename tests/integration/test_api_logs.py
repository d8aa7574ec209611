"""What the api logs: the job events of its own moves (accept, cancel) once they commit, and, when asked
(`--access-log`, ACCESS_LOG=1), one access line per request without the query string."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.telemetry import logs

SECRET = "payload-value-5e1d"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The JSON lines of the events and access loggers."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter("api"))
    for logger in (logs.EVENTS, logs.ACCESS):
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    yield stream
    for logger in (logs.EVENTS, logs.ACCESS):
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)


def parsed(stream: io.StringIO, logger: str) -> list[dict[str, Any]]:
    return [line for line in map(json.loads, stream.getvalue().splitlines()) if line["logger"] == logger]


def client_of(settings: Settings) -> TestClient:
    token = issue_token(settings.auth_secret, tenant="acme", user="alice")
    return TestClient(create_app(settings), headers={"Authorization": f"Bearer {token}"})


def test_an_accepted_and_a_cancelled_job_are_logged_with_the_tokens_tenant(
    settings: Settings, engine: Engine, clock: FakeClock, captured: io.StringIO
) -> None:
    request: dict[str, Any] = {
        "json": {"kind": "noop", "payload": {"s": SECRET}},
        "headers": {"Idempotency-Key": "a"},
    }
    with client_of(settings) as client:
        answer = client.post("/jobs", **request)
        assert answer.status_code == 202
        job_id = answer.json()["id"]
        assert client.post("/jobs", **request).json()["id"] == job_id
        assert client.post(f"/jobs/{job_id}/cancel").status_code == 200

    events = parsed(captured, "outbox_bridge.events")
    assert [(e["event"], e["job_id"], e["tenant"], e["kind"]) for e in events] == [
        ("accepted", job_id, "acme", "noop"),  # once: the repeated key found the job, it accepted nothing
        ("cancelled", job_id, "acme", "noop"),
    ]
    assert parsed(captured, "outbox_bridge.access") == []  # off unless asked for
    assert SECRET not in captured.getvalue()


@pytest.mark.databases("sqlite")
def test_the_access_log_has_method_path_status_and_duration_but_never_the_query(
    settings: Settings, engine: Engine, clock: FakeClock, captured: io.StringIO
) -> None:
    with client_of(settings.model_copy(update={"access_log": True})) as client:
        client.get("/jobs/no-such-job/result?sig=secret-signature&expires=1")
        client.get("/healthz")

    first, second = parsed(captured, "outbox_bridge.access")
    assert {k: first[k] for k in ("method", "path", "status")} == {
        "method": "GET",
        "path": "/jobs/no-such-job/result",
        "status": 404,
    }
    assert isinstance(first["duration_ms"], float) and first["duration_ms"] >= 0
    assert first["message"].startswith("GET /jobs/no-such-job/result 404 ")
    assert (second["path"], second["status"]) == ("/healthz", 200)
    assert "secret-signature" not in captured.getvalue()


@pytest.mark.databases("sqlite")
def test_the_access_log_has_each_submission_once_fast_path_or_route(
    settings: Settings, engine: Engine, clock: FakeClock, captured: io.StringIO
) -> None:
    with client_of(settings.model_copy(update={"access_log": True})) as client:
        taken = client.post("/jobs", json={"kind": "noop", "payload": {}}, headers={"Idempotency-Key": "a"})
        routed = client.post("/jobs", json={"kind": "noop", "payload": {}})  # no key: the route refuses it
    assert (taken.status_code, routed.status_code) == (202, 400)
    lines = parsed(captured, "outbox_bridge.access")
    assert [(line["method"], line["path"], line["status"]) for line in lines] == [
        ("POST", "/jobs", 202),
        ("POST", "/jobs", 400),
    ]

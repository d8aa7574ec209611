"""The served OpenAPI document says what the server does, so that a client generated from it works: every
media type a result comes in, the bytes first (a generated client takes the first type it can read), the
cursor's real form, and `delay_seconds` and `run_at` as mutually exclusive."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jsonschema_rs
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from outbox_bridge.api import results
from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.clock import FakeClock, isoformat
from outbox_bridge.core.settings import Settings

# The document is the same on any store: once, on SQLite.
pytestmark = pytest.mark.databases("sqlite")

SOON = "in a minute"  # stands for a `run_at` a minute from now


@pytest.fixture
def client(settings: Settings, engine: Engine) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture
def document(client: TestClient) -> dict[str, Any]:
    return client.get("/openapi.json").json()


@pytest.fixture
def auth(settings: Settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(settings.auth_secret, tenant='acme', user='alice')}"}


def test_a_result_is_declared_in_every_media_type_it_is_served_in_the_bytes_first(
    document: dict[str, Any],
) -> None:
    content = document["paths"]["/jobs/{job_id}/result"]["get"]["responses"]["200"]["content"]
    assert {"text/csv", "application/json", *results.FILE_MEDIA_TYPES} <= set(content)
    first = next(iter(content.values()))
    assert next(iter(content)) == "application/octet-stream"
    assert first["schema"] == {"type": "string", "format": "binary"}
    assert content["text/csv"]["schema"] == {"type": "string", "format": "binary"}


def test_the_cursor_is_documented_in_the_form_the_server_takes(
    client: TestClient, document: dict[str, Any], auth: dict[str, str]
) -> None:
    [cursor] = [p for p in document["paths"]["/jobs"]["get"]["parameters"] if p["name"] == "cursor"]
    pattern = re.compile(cursor["schema"]["pattern"])
    assert "bad-cursor" in cursor["description"]
    for n in range(3):
        client.post(
            "/jobs", json={"kind": "noop", "payload": {}}, headers={**auth, "Idempotency-Key": f"k{n}"}
        )
    page = client.get("/jobs", params={"limit": 1}, headers=auth).json()
    assert pattern.search(page["next_cursor"])
    assert client.get("/jobs", params={"cursor": page["next_cursor"]}, headers=auth).status_code == 200
    for outside in ("hello world", page["next_cursor"] + "=", "a+b/c"):
        assert not pattern.search(outside)
        response = client.get("/jobs", params={"cursor": outside}, headers=auth)
        assert response.status_code == 400


@pytest.mark.parametrize(
    ("start", "accepted"),
    [
        ({"delay_seconds": 5, "run_at": SOON}, False),
        ({"delay_seconds": 5}, True),
        ({"run_at": SOON}, True),
        ({"delay_seconds": None, "run_at": SOON}, True),
        ({"delay_seconds": 5, "run_at": None}, True),
    ],
    ids=["both", "a delay", "a time", "a time and a null delay", "a delay and a null time"],
)
def test_delay_and_run_at_are_documented_as_mutually_exclusive_as_the_server_takes_them(
    client: TestClient,
    clock: FakeClock,
    document: dict[str, Any],
    auth: dict[str, str],
    start: dict[str, Any],
    accepted: bool,
) -> None:
    schemas = document["components"]["schemas"]
    soon = isoformat(clock.now() + 60)
    body = {"kind": "noop", "payload": {}, **{k: soon if v == SOON else v for k, v in start.items()}}
    # The variant's own constraint on the two, as a validator reads it (its payload is another schema's).
    rule = {"not": schemas["JobCreate_noop"]["not"]}
    assert jsonschema_rs.Draft202012Validator(rule).is_valid(body) is accepted
    response = client.post("/jobs", json=body, headers={**auth, "Idempotency-Key": "k"})
    assert response.status_code == (202 if accepted else 400)
    for name in ("delay_seconds", "run_at"):
        assert "Mutually exclusive" in schemas["JobCreate_noop"]["properties"][name]["description"]

"""Methods: a method a path does not take is 400 `method-not-allowed` with an `Allow` that names every method
the path takes; HEAD is answered as GET without the body wherever GET is."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.settings import Settings

PROBLEM = "urn:outbox-bridge:problem:"


@pytest.fixture
def client(settings: Settings, engine: Engine) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def auth(settings: Settings) -> dict[str, str]:
    token = issue_token(settings.auth_secret, tenant="acme", user="alice", operator=True)
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("DELETE", "/jobs", "GET, HEAD, POST"),
        ("PUT", "/jobs", "GET, HEAD, POST"),
        ("PUT", "/jobs/some-id", "GET, HEAD"),
        ("GET", "/jobs/some-id/cancel", "POST"),
        ("HEAD", "/jobs/some-id/cancel", "POST"),
        ("POST", "/jobs/some-id/result", "GET, HEAD"),
        ("POST", "/healthz", "GET, HEAD"),
        ("DELETE", "/metrics", "GET, HEAD"),
    ],
)
def test_a_wrong_method_is_400_with_an_allow_naming_every_method_of_the_path(
    client: TestClient, auth: dict[str, str], method: str, path: str, allow: str
) -> None:
    response = client.request(method, path, headers=auth)
    assert response.status_code == 400
    assert response.headers["allow"] == allow
    if method != "HEAD":
        problem = response.json()
        assert problem["type"] == PROBLEM + "method-not-allowed"
        assert problem["detail"] == f"This route takes: {allow}."


def job(client: TestClient, auth: dict[str, str]) -> str:
    response = client.post(
        "/jobs", json={"kind": "noop", "payload": {}}, headers={**auth, "Idempotency-Key": "k"}
    )
    assert response.status_code == 202
    return str(response.json()["id"])


@pytest.mark.parametrize(
    "path",
    [
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
        "/jobs",
        "/jobs/{id}",
        "/jobs/no-such-job",
        "/ui/login",
    ],
)
def test_head_is_answered_as_get_without_the_body(
    client: TestClient, auth: dict[str, str], path: str
) -> None:
    path = path.format(id=job(client, auth))
    got = client.get(path, headers=auth)
    head = client.head(path, headers=auth)
    assert head.status_code == got.status_code
    assert head.headers["content-type"] == got.headers["content-type"]
    assert int(head.headers["content-length"]) > 0
    assert head.content == b""


def test_head_without_a_token_is_refused_as_get_is(client: TestClient) -> None:
    head = client.head("/jobs")
    assert head.status_code == 401
    assert head.headers["www-authenticate"] == "Bearer"
    assert head.content == b""

"""Every refusal through the real app: 400, 401, 413 and 503 as problem+json, and each leaves no job and no
outbox row behind."""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import Engine, event, func, select

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, migrate
from outbox_bridge.jobstore.schema import jobs, outbox
from tests.conftest import make_settings

PROBLEM = "application/problem+json"


def counts(engine: Engine) -> tuple[int, int]:
    """(job rows, outbox rows)."""
    with engine.connect() as conn:
        return (
            conn.execute(select(func.count()).select_from(jobs)).scalar_one(),
            conn.execute(select(func.count()).select_from(outbox)).scalar_one(),
        )


def bearer(settings: Settings, tenant: str = "acme") -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(settings.auth_secret, tenant=tenant, user='alice')}"}


def assert_problem(response: Any, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    problem = response.json()
    assert problem["type"] == f"urn:outbox-bridge:problem:{slug}"
    assert problem["status"] == status
    assert problem["title"] and problem["detail"]
    return problem  # type: ignore[no-any-return]


@pytest.fixture
def client(settings: Settings, engine: Engine) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def post_raw(client: TestClient, settings: Settings, body: str | bytes, **headers: str) -> Any:
    sent = {**bearer(settings), "Idempotency-Key": "k-1", "Content-Type": "application/json", **headers}
    return client.post("/jobs", content=body, headers=sent)


BAD_JOBS: dict[str, tuple[Any, str]] = {
    "unknown kind": ({"kind": "teleport", "payload": {}}, "unknown-kind"),
    "payload not fitting the kind": ({"kind": "sleep", "payload": {"seconds": -1}}, "invalid-payload"),
    "payload with unknown fields": ({"kind": "sleep", "payload": {"seconds": 1, "x": 1}}, "invalid-payload"),
    "sleep seconds a string": ({"kind": "sleep", "payload": {"seconds": "5"}}, "invalid-payload"),
    "sleep seconds a boolean": ({"kind": "sleep", "payload": {"seconds": True}}, "invalid-payload"),
    "export rows a string": ({"kind": "export", "payload": {"rows": "5", "chunk": 1}}, "invalid-payload"),
    "flaky attempt a string": ({"kind": "flaky", "payload": {"fail_until_attempt": "1"}}, "invalid-payload"),
    "payload missing": ({"kind": "noop"}, "invalid-request"),
    "payload a list": ({"kind": "noop", "payload": [1, 2]}, "invalid-request"),
    "payload a string": ({"kind": "noop", "payload": "{}"}, "invalid-request"),
    "kind missing": ({"payload": {}}, "invalid-request"),
    "deadline zero": ({"kind": "noop", "payload": {}, "deadline_seconds": 0}, "invalid-request"),
    "deadline negative": ({"kind": "noop", "payload": {}, "deadline_seconds": -5}, "invalid-request"),
    "deadline a string": ({"kind": "noop", "payload": {}, "deadline_seconds": "60"}, "invalid-request"),
    "deadline a fraction": ({"kind": "noop", "payload": {}, "deadline_seconds": 1.5}, "invalid-request"),
    "deadline a boolean": ({"kind": "noop", "payload": {}, "deadline_seconds": True}, "invalid-request"),
    "deadline past 30 days": (
        {"kind": "noop", "payload": {}, "deadline_seconds": 30 * 86400 + 1},
        "invalid-request",
    ),
    "priority unknown": ({"kind": "noop", "payload": {}, "priority": "urgent"}, "invalid-request"),
    "priority a number": ({"kind": "noop", "payload": {}, "priority": 0}, "invalid-request"),
    "priority upper case": ({"kind": "noop", "payload": {}, "priority": "HIGH"}, "invalid-request"),
    "payload nested 40 deep": (
        {"kind": "noop", "payload": json.loads('{"a":' * 40 + "1" + "}" * 40)},
        "invalid-payload",
    ),
}


@pytest.mark.parametrize("body,slug", BAD_JOBS.values(), ids=BAD_JOBS.keys())
def test_an_invalid_job_is_400_and_writes_nothing(
    client: TestClient, settings: Settings, engine: Engine, body: Any, slug: str
) -> None:
    assert_problem(post_raw(client, settings, json.dumps(body)), 400, slug)
    assert counts(engine) == (0, 0)


def test_an_unknown_priority_is_400_naming_the_field(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    body = {"kind": "noop", "payload": {}, "priority": "urgent"}
    problem = assert_problem(post_raw(client, settings, json.dumps(body)), 400, "invalid-request")
    assert ["body", "priority"] in [issue["loc"] for issue in problem["errors"]]
    assert counts(engine) == (0, 0)


BAD_BODIES: dict[str, tuple[str, str, str]] = {
    "malformed JSON": ('{"kind": "noop", "payload": {', "application/json", "invalid-request"),
    "not JSON at all": ("kind=noop", "application/x-www-form-urlencoded", "invalid-request"),
    "a lone surrogate": (
        '{"kind": "noop", "payload": {"s": "\\ud800"}}',
        "application/json",
        "invalid-payload",
    ),
    "NaN": ('{"kind": "noop", "payload": {"x": NaN}}', "application/json", "invalid-payload"),
    "Infinity": ('{"kind": "noop", "payload": {"x": -Infinity}}', "application/json", "invalid-payload"),
    "nesting past the parser's limit": (
        '{"kind": "noop", "payload": ' + "[" * 5000 + "]" * 5000 + "}",
        "application/json",
        "invalid-payload",
    ),
}


@pytest.mark.parametrize("body,content_type,slug", BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_a_body_the_store_could_not_keep_is_400_and_writes_nothing(
    client: TestClient, settings: Settings, engine: Engine, body: str, content_type: str, slug: str
) -> None:
    assert_problem(post_raw(client, settings, body, **{"Content-Type": content_type}), 400, slug)
    assert counts(engine) == (0, 0)


@pytest.mark.parametrize("key", [None, "", "k" * 256], ids=["missing", "empty", "256 chars"])
def test_the_idempotency_key_is_required_and_at_most_255_chars(
    client: TestClient, settings: Settings, engine: Engine, key: str | None
) -> None:
    headers = {**bearer(settings), **({"Idempotency-Key": key} if key is not None else {})}
    response = client.post("/jobs", json={"kind": "noop", "payload": {}}, headers=headers)
    problem = assert_problem(response, 400, "invalid-request")
    assert problem["errors"][0]["loc"] == ["header", "Idempotency-Key"]
    assert counts(engine) == (0, 0)
    longest = {**bearer(settings), "Idempotency-Key": "k" * 255}
    assert client.post("/jobs", json={"kind": "noop", "payload": {}}, headers=longest).status_code == 202


def test_an_idempotency_key_is_utf8_and_its_limit_counts_characters(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    def post(key: bytes) -> Response:
        headers: dict[str, str | bytes] = {**bearer(settings), "Idempotency-Key": key}
        return client.post("/jobs", json={"kind": "noop", "payload": {}}, headers=headers)  # type: ignore[arg-type]

    key = "é" * 255  # 510 bytes of UTF-8: within the limit, which counts characters
    first = post(key.encode())
    assert first.status_code == 202
    with engine.connect() as conn:
        assert conn.execute(select(jobs.c.operation_key)).scalar_one() == key
    assert post(key.encode()).json()["id"] == first.json()["id"]
    assert_problem(post(("é" * 256).encode()), 400, "invalid-request")  # bytes that are not UTF-8: e2e
    assert counts(engine) == (1, 1)


def test_a_kind_the_code_knows_but_the_deployment_does_not_allow_is_400(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, allowed_kinds=("noop",))
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    with TestClient(create_app(settings)) as client:
        response = post_raw(client, settings, json.dumps({"kind": "sleep", "payload": {"seconds": 1}}))
    assert assert_problem(response, 400, "unknown-kind")["detail"].endswith("kinds: noop.")
    assert counts(engine) == (0, 0)
    engine.dispose()


def _tokens(settings: Settings) -> dict[str, str | None]:
    now_claims = {"tenant": "acme", "sub": "alice", "exp": 4_000_000_000}
    return {
        "no header": None,
        "basic scheme": "Basic YWxpY2U6c2VjcmV0",
        "garbage": "Bearer not-a-token",
        "other secret": "Bearer "
        + issue_token("another-secret-that-is-long-enough-32", tenant="acme", user="a"),
        "expired": "Bearer " + issue_token(settings.auth_secret, tenant="acme", user="a", ttl_seconds=-60),
        "no tenant": "Bearer " + jwt.encode({"sub": "alice", "exp": 4_000_000_000}, settings.auth_secret),
        "unsigned": "Bearer " + jwt.encode(now_claims, key=None, algorithm="none"),
    }


ROUTES = [
    ("POST", "/jobs"),
    ("GET", "/jobs"),
    ("GET", "/jobs/some-id"),
    ("POST", "/jobs/some-id/cancel"),
    ("GET", "/jobs/some-id/result"),
]


@pytest.mark.parametrize("method,path", ROUTES)
def test_every_job_route_needs_a_valid_bearer_token(
    client: TestClient, settings: Settings, engine: Engine, method: str, path: str
) -> None:
    for name, authorization in _tokens(settings).items():
        headers = {"Idempotency-Key": "k-1", **({"Authorization": authorization} if authorization else {})}
        response = client.request(method, path, json={"kind": "noop", "payload": {}}, headers=headers)
        assert_problem(response, 401, "unauthorized")
        assert response.headers["www-authenticate"].startswith("Bearer"), name
    assert counts(engine) == (0, 0)


def test_a_body_over_the_declared_limit_is_413_before_it_is_read(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    body = json.dumps({"kind": "noop", "payload": {"pad": "x" * settings.max_body_bytes}})
    response = post_raw(client, settings, body)
    assert_problem(response, 413, "payload-too-large")
    assert counts(engine) == (0, 0)


def test_a_streamed_body_without_a_length_is_cut_off_at_the_limit_with_413(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        yield b'{"kind": "noop", "payload": {"pad": "'
        for _ in range(200):
            sent += 1024
            yield b"x" * 1024
        yield b'"}}'

    response = post_raw(client, settings, chunks())  # type: ignore[arg-type]
    assert "content-length" not in {k.lower() for k in response.request.headers}
    assert_problem(response, 413, "payload-too-large")
    assert counts(engine) == (0, 0)


def test_a_body_of_exactly_the_limit_is_accepted_and_one_byte_more_is_not(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, max_body_bytes=1024)
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)

    def body(size: int) -> bytes:
        empty = json.dumps({"kind": "noop", "payload": {"pad": ""}}).encode()
        return json.dumps({"kind": "noop", "payload": {"pad": "x" * (size - len(empty))}}).encode()

    with TestClient(create_app(settings)) as client:
        assert post_raw(client, settings, body(1024)).status_code == 202
        assert post_raw(client, settings, body(1025), **{"Idempotency-Key": "k-2"}).status_code == 413
    assert counts(engine) == (1, 1)
    engine.dispose()


def _store_unavailable(response: Any) -> None:
    assert_problem(response, 503, "store-unavailable")
    assert int(response.headers["retry-after"]) >= 1


@pytest.mark.databases("sqlite")
def test_a_store_locked_past_its_timeout_is_503_with_retry_after_and_nothing_written(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, store_lock_timeout_seconds=0.3)
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    holder = sqlite3.connect(tmp_path / "jobs.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with TestClient(create_app(settings)) as client:
            _store_unavailable(post_raw(client, settings, json.dumps({"kind": "noop", "payload": {}})))
            assert client.get("/readyz").status_code == 200  # readers are not blocked by a writer
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert counts(engine) == (0, 0)
    engine.dispose()


@pytest.mark.databases("sqlite")
def test_a_store_in_a_missing_directory_is_503_and_the_process_stays_up(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, database_url=f"sqlite:///{tmp_path / 'gone' / 'jobs.db'}")
    with TestClient(create_app(settings)) as client:
        _store_unavailable(post_raw(client, settings, json.dumps({"kind": "noop", "payload": {}})))
        _store_unavailable(client.get("/jobs", headers=bearer(settings)))
        _store_unavailable(client.get("/readyz"))
        assert client.get("/healthz").status_code == 200
    assert not (tmp_path / "gone").exists()


@pytest.mark.databases("sqlite")
def test_a_read_only_store_is_503_and_nothing_written(tmp_path: Path) -> None:
    writable = make_settings(tmp_path)
    engine = db.make_engine(writable)
    migrate.init_schema(writable, engine)
    read_only = make_settings(
        tmp_path, database_url=f"sqlite:///file:{tmp_path / 'jobs.db'}?mode=ro&uri=true"
    )
    with TestClient(create_app(read_only)) as client:
        _store_unavailable(post_raw(client, read_only, json.dumps({"kind": "noop", "payload": {}})))
    assert counts(engine) == (0, 0)
    engine.dispose()


@pytest.mark.databases("sqlite")
def test_a_full_disk_is_503_and_nothing_written(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    app = create_app(settings)

    # SQLite's own page cap makes the file unable to grow: the same SQLITE_FULL a full disk gives.
    @event.listens_for(app.state.engine, "connect")
    def _cap(dbapi_connection: Any, _record: Any) -> None:
        pages = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
        dbapi_connection.execute(f"PRAGMA max_page_count={pages}")

    big = json.dumps({"kind": "noop", "payload": {"pad": "x" * 30_000}})
    with TestClient(app) as client:
        _store_unavailable(post_raw(client, settings, big))
    assert counts(engine) == (0, 0)
    engine.dispose()


def test_an_unsupported_method_is_400_and_an_unknown_route_is_404_never_405_or_a_redirect(
    client: TestClient, settings: Settings
) -> None:
    problem = assert_problem(client.delete("/jobs", headers=bearer(settings)), 400, "method-not-allowed")
    assert "POST" in problem["detail"]
    assert_problem(client.get("/nowhere"), 404, "route-not-found")
    assert_problem(
        client.get("/jobs/", headers=bearer(settings), follow_redirects=False), 404, "route-not-found"
    )
    assert_problem(client.put("/jobs/x/cancel", headers=bearer(settings)), 400, "method-not-allowed")


@pytest.mark.parametrize(
    "params",
    [{"state": "finished"}, {"limit": 0}, {"limit": 101}, {"limit": "ten"}, {"cursor": "not-a-cursor"}],
    ids=["unknown state", "limit 0", "limit 101", "limit text", "bad cursor"],
)
def test_bad_listing_parameters_are_400(
    client: TestClient, settings: Settings, params: dict[str, Any]
) -> None:
    response = client.get("/jobs", params=params, headers=bearer(settings))
    assert_problem(response, 400, "bad-cursor" if "cursor" in params else "invalid-request")


def _forged(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [_forged("nan|x"), _forged("inf|x"), _forged("-inf|x"), _forged("1e999|x"), "hello world", "AAAA"],
    ids=["nan", "inf", "-inf", "1e999", "arbitrary text", "zero bytes"],
)
def test_a_forged_cursor_is_400_bad_cursor_not_an_empty_page(
    client: TestClient, settings: Settings, cursor: str
) -> None:
    assert client.post(
        "/jobs", json={"kind": "noop", "payload": {}}, headers={**bearer(settings), "Idempotency-Key": "k"}
    ).is_success
    response = client.get("/jobs", params={"cursor": cursor}, headers=bearer(settings))
    assert_problem(response, 400, "bad-cursor")

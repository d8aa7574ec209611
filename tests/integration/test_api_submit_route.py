"""`POST /jobs`'s route class (`api.routes.submit_route`) through the real app on a real store: the requests
sent as documented are read by its own handler, any other by FastAPI's handler for the route, which answers
it as it always has; both call the one endpoint, behind the app's whole middleware stack."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.api.routes import submit_route
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.schema import jobs

NOOP = {"kind": "noop", "payload": {}}


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The Idempotency-Keys of the requests the route's own handler read (the fast path)."""
    keys: list[str] = []
    arguments = submit_route._arguments

    def counted(*args: Any) -> Any:
        found = arguments(*args)
        if found is not None:
            keys.append(found["key"])
        return found

    monkeypatch.setattr(submit_route, "_arguments", counted)
    return keys


def _headers(settings: Settings, key: str | None = "k1", **more: str) -> dict[str, str]:
    token = issue_token(settings.auth_secret, tenant="acme", user="alice")
    found = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", **more}
    if key is not None:
        found["Idempotency-Key"] = key
    return found


def _operator(settings: Settings) -> dict[str, str]:
    token = issue_token(settings.auth_secret, tenant="ops", user="scraper", operator=True)
    return {"Authorization": f"Bearer {token}"}


def _count(engine: Engine) -> int:
    return int(
        db.read(engine, lambda conn: conn.execute(select(func.count()).select_from(jobs)).scalar_one())
    )


def test_a_plain_submission_is_taken_by_the_fast_path_and_answered_as_the_route_does(
    client: TestClient, settings: Settings, engine: Engine, taken: list[str]
) -> None:
    fast = client.post("/jobs", json=NOOP, headers=_headers(settings))
    assert fast.status_code == 202 and taken == ["k1"]
    # The same key again, declined by the fast path (a header sent twice): the route answers with the job.
    headers = [*_headers(settings).items(), ("X-Twice", "1"), ("X-Twice", "2")]
    routed = client.post("/jobs", json=NOOP, headers=headers)
    assert taken == ["k1"], "the request with a header sent twice went to the route"
    assert (routed.status_code, routed.json()) == (fast.status_code, fast.json())
    assert routed.headers["location"] == fast.headers["location"] == f"/jobs/{fast.json()['id']}"
    same = {name for name in fast.headers if name not in {"date", "content-length"}}
    assert {name: fast.headers[name] for name in same} == {name: routed.headers[name] for name in same}
    assert _count(engine) == 1


@pytest.mark.parametrize(
    ("headers", "body", "status", "slug"),
    [
        ({"Idempotency-Key": None}, NOOP, 400, "invalid-request"),
        ({"Idempotency-Key": "k" * 256}, NOOP, 400, "invalid-request"),
        ({"Authorization": "Bearer not-a-token"}, NOOP, 401, "unauthorized"),
        ({"Authorization": None}, NOOP, 401, "unauthorized"),
        ({}, {"kind": "noop"}, 400, "invalid-request"),
        ({}, [NOOP], 400, "invalid-request"),
        ({"Content-Type": "text/plain"}, NOOP, 400, "invalid-request"),
        ({}, {**NOOP, "concurrency_key": ""}, 400, "invalid-request"),
        ({}, {**NOOP, "concurrency_key": "k" * 129}, 400, "invalid-request"),
        ({}, {**NOOP, "concurrency_key": "a\nb"}, 400, "invalid-request"),
    ],
    ids=[
        "no key",
        "key too long",
        "bad token",
        "no token",
        "no payload",
        "not an object",
        "not json",
        "empty concurrency key",
        "concurrency key too long",
        "concurrency key with a newline",
    ],
)
def test_what_the_fast_path_declines_the_route_refuses_and_nothing_is_written(
    client: TestClient,
    settings: Settings,
    engine: Engine,
    taken: list[str],
    headers: dict[str, str | None],
    body: Any,
    status: int,
    slug: str,
) -> None:
    sent = {k: v for k, v in (_headers(settings) | headers).items() if v is not None}
    response = client.post("/jobs", content=json.dumps(body), headers=sent)
    assert response.status_code == status, response.text
    assert response.json()["type"].endswith(slug)
    assert taken == [] and _count(engine) == 0


def test_a_concurrency_key_is_taken_by_the_fast_path_and_answered_as_the_route_does(
    client: TestClient, settings: Settings, engine: Engine, taken: list[str]
) -> None:
    keyed = {**NOOP, "concurrency_key": "customer-42"}
    fast = client.post("/jobs", json=keyed, headers=_headers(settings))
    assert fast.status_code == 202 and taken == ["k1"]
    assert fast.json()["concurrency_key"] == "customer-42"
    # The same key again through the route (a header sent twice): the same job, the same view.
    headers = [*_headers(settings).items(), ("X-Twice", "1"), ("X-Twice", "2")]
    routed = client.post("/jobs", json=keyed, headers=headers)
    assert taken == ["k1"] and (routed.status_code, routed.json()) == (202, fast.json())
    # Another concurrency key under it is the conflict on both paths.
    other = {**NOOP, "concurrency_key": "customer-43"}
    fast_conflict = client.post("/jobs", json=other, headers=_headers(settings))
    routed_conflict = client.post("/jobs", json=other, headers=headers)
    assert taken == ["k1", "k1"]
    assert (fast_conflict.status_code, routed_conflict.status_code) == (409, 409)
    assert fast_conflict.json() == routed_conflict.json()
    assert _count(engine) == 1


def test_a_bad_concurrency_key_gets_the_same_problem_from_the_route_as_any_field_error(
    client: TestClient, settings: Settings, taken: list[str]
) -> None:
    bad = {**NOOP, "concurrency_key": "k" * 129}
    headers = [*_headers(settings).items(), ("X-Twice", "1"), ("X-Twice", "2")]
    declined = client.post("/jobs", json=bad, headers=_headers(settings))
    routed = client.post("/jobs", json=bad, headers=headers)
    assert (declined.status_code, declined.json()) == (routed.status_code, routed.json())
    assert declined.json()["errors"][0]["loc"] == ["body", "concurrency_key"] and taken == []


def test_what_the_fast_path_takes_and_the_kind_refuses_gets_the_routes_problem(
    client: TestClient, settings: Settings, engine: Engine, taken: list[str]
) -> None:
    response = client.post("/jobs", json={"kind": "no-such-kind", "payload": {}}, headers=_headers(settings))
    assert response.status_code == 400 and response.json()["type"].endswith("unknown-kind")
    assert taken == ["k1"] and _count(engine) == 0


def test_the_fast_path_is_counted_under_the_routes_template(
    client: TestClient, settings: Settings, taken: list[str]
) -> None:
    assert client.post("/jobs", json=NOOP, headers=_headers(settings)).status_code == 202
    metrics = client.get("/metrics", headers=_operator(settings)).text
    assert 'outbox_bridge_http_requests_total{method="POST",route="/jobs",status="202"} 1.0' in metrics


def test_the_fast_paths_answers_carry_the_headers_of_every_answer_at_its_path(
    client: TestClient, settings: Settings, taken: list[str]
) -> None:
    accepted = client.post("/jobs", json=NOOP, headers=_headers(settings))
    conflict = client.post("/jobs", json={"kind": "noop", "payload": {"n": 1}}, headers=_headers(settings))
    assert (accepted.status_code, conflict.status_code) == (202, 409) and taken == ["k1", "k1"]
    for answer in (accepted, conflict):
        assert answer.headers.get_list("x-content-type-options") == ["nosniff"]
        assert answer.headers.get_list("cache-control") == ["no-store"]
    assert conflict.headers["content-type"] == "application/problem+json"


def test_a_chunked_body_is_taken_and_one_over_the_limit_is_refused_before_the_route(
    client: TestClient, settings: Settings, engine: Engine, taken: list[str]
) -> None:
    chunked = client.post("/jobs", content=iter([json.dumps(NOOP).encode()]), headers=_headers(settings))
    assert chunked.status_code == 202, chunked.text
    padded = {"kind": "noop", "payload": {"pad": "x" * settings.max_body_bytes}}
    too_large = client.post("/jobs", json=padded, headers=_headers(settings, "k2"))
    assert too_large.status_code == 413 and too_large.json()["type"].endswith("payload-too-large")
    assert taken == ["k1"] and _count(engine) == 1


def test_middleware_added_to_the_app_applies_to_every_submission(
    settings: Settings, engine: Engine, clock: FakeClock, taken: list[str]
) -> None:
    seen: list[str] = []

    class Noting:
        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                seen.append(f"{scope['method']} {scope['path']}")
            await self.app(scope, receive, send)

    app = create_app(settings)
    app.add_middleware(Noting)
    with TestClient(app) as client:
        fast = client.post("/jobs", json=NOOP, headers=_headers(settings))
        refused = client.post("/jobs", json=NOOP, headers=_headers(settings, None))
    assert (fast.status_code, refused.status_code) == (202, 400) and taken == ["k1"]
    assert seen == ["POST /jobs", "POST /jobs"]


def test_a_store_failure_and_an_unexpected_error_get_the_apps_answers_and_are_counted(
    settings: Settings, engine: Engine, clock: FakeClock, taken: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from outbox_bridge.api.committer import GroupCommitter

    failures: list[Exception] = [db.StoreUnavailable("the store is gone"), RuntimeError("a bug")]

    async def failing(self: GroupCommitter, **fields: Any) -> Any:
        raise failures.pop(0)

    monkeypatch.setattr(GroupCommitter, "accept", failing)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        unavailable = client.post("/jobs", json=NOOP, headers=_headers(settings, "k1"))
        unexpected = client.post("/jobs", json=NOOP, headers=_headers(settings, "k2"))
        metrics = client.get("/metrics", headers=_operator(settings)).text
    assert unavailable.status_code == 503 and unavailable.json()["type"].endswith("store-unavailable")
    assert unavailable.headers["retry-after"]
    assert unexpected.status_code == 503 and unexpected.json()["type"].endswith("internal-error")
    assert "a bug" not in unexpected.text
    for answer in (unavailable, unexpected):  # once each, though the error handler sets them itself
        assert answer.headers.get_list("x-content-type-options") == ["nosniff"]
        assert answer.headers.get_list("cache-control") == ["no-store"]
    assert taken == ["k1", "k2"] and _count(engine) == 0
    assert 'outbox_bridge_http_requests_total{method="POST",route="/jobs",status="503"} 2.0' in metrics


def test_an_unexpected_error_is_raised_again_for_the_server_to_log(
    settings: Settings, engine: Engine, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from outbox_bridge.api.committer import GroupCommitter

    async def failing(self: GroupCommitter, **fields: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(GroupCommitter, "accept", failing)
    with TestClient(create_app(settings)) as client, pytest.raises(RuntimeError, match="a bug"):
        client.post("/jobs", json=NOOP, headers=_headers(settings))

"""Health, readiness, metrics and the OpenAPI document, through the real app on a real store."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, heartbeats
from outbox_bridge.jobstore.heartbeats import this_process
from tests.support.store import new_jobs

ALLOWED_STATUSES = {"200", "202", "400", "401", "404", "409", "413", "503"}


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def operator(settings: Settings) -> dict[str, str]:
    """What `/metrics` asks for: an operator's bearer token (or METRICS_TOKEN)."""
    token = issue_token(settings.auth_secret, tenant="ops", user="scraper", operator=True)
    return {"Authorization": f"Bearer {token}"}


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text, or fail."""
    rendered = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = "^" + re.escape(f"{name}{{{rendered}}}" if labels else name) + r" (\S+)$"
    found = re.search(pattern, text, re.MULTILINE)
    assert found is not None, f"no sample {name} {labels} in:\n{text}"
    return float(found.group(1))


def test_health_and_readiness_answer_when_the_store_is_there(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}


def test_metrics_count_requests_by_route_template_and_read_the_store_at_scrape_time(
    client: TestClient, settings: Settings, clock: FakeClock
) -> None:
    auth = {"Authorization": f"Bearer {issue_token(settings.auth_secret, tenant='acme', user='alice')}"}
    for n in range(3):
        client.post(
            "/jobs", json={"kind": "noop", "payload": {"n": n}}, headers={**auth, "Idempotency-Key": f"{n}"}
        )
    client.post("/jobs", json={"kind": "noop", "payload": {"n": 0}}, headers={**auth, "Idempotency-Key": "0"})
    client.get("/jobs/first-unknown", headers=auth)
    client.get("/jobs/second-unknown", headers=auth)
    clock.advance(7.5)
    response = client.get("/metrics", headers=operator(settings))
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = response.text
    assert sample(text, "outbox_bridge_http_requests_total", method="POST", route="/jobs", status="202") == 4
    assert (
        sample(text, "outbox_bridge_http_requests_total", method="GET", route="/jobs/{job_id}", status="404")
        == 2
    )
    assert "first-unknown" not in text
    assert sample(text, "outbox_bridge_jobs_accepted_total", kind="noop") == 3
    assert sample(text, "outbox_bridge_jobs", state="queued") == 3
    assert sample(text, "outbox_bridge_jobs", state="succeeded") == 0
    assert sample(text, "outbox_bridge_outbox_pending") == 3
    assert sample(text, "outbox_bridge_outbox_oldest_age_seconds") == 7.5


def test_the_document_pages_and_their_files_are_counted_under_their_routes_not_as_unmatched(
    client: TestClient, settings: Settings
) -> None:
    for path in ("/openapi.json", "/openapi.json", "/docs", "/redoc", "/static/redoc/redoc.standalone.js"):
        assert client.get(path).status_code == 200, path
    assert client.get("/static/redoc/no-such-file.js").status_code == 404
    assert client.get("/no-such-route").status_code == 404
    text = client.get("/metrics", headers=operator(settings)).text

    def count(route: str, status: str = "200") -> float:
        return sample(text, "outbox_bridge_http_requests_total", method="GET", route=route, status=status)

    assert count("/openapi.json") == 2
    assert count("/docs") == count("/redoc") == 1
    assert count("/static/redoc/{path}") == count("/static/redoc/{path}", "404") == 1
    assert count("unmatched", "404") == 1
    assert "no-such" not in text and "redoc.standalone.js" not in text


def test_metrics_count_live_processes_by_role_from_their_heartbeats(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    for role in ("consumer", "consumer", "relay"):
        me = this_process(role, clock.now())
        db.transact(engine, heartbeats.beat, me, clock.now(), forget_before=0.0)
    [job_id] = new_jobs(engine, 1)

    before = client.get("/metrics", headers=operator(settings)).text
    clock.advance(20.0)  # past 3 beats of 5 s: nobody is alive any more
    after = client.get("/metrics", headers=operator(settings)).text

    assert [sample(before, "outbox_bridge_processes_alive", role=r) for r in ("relay", "consumer")] == [1, 2]
    assert sample(before, "outbox_bridge_queued_oldest_age_seconds") == 0
    assert [sample(after, "outbox_bridge_processes_alive", role=r) for r in ("relay", "consumer")] == [0, 0]
    assert sample(after, "outbox_bridge_queued_oldest_age_seconds") == 20.0
    assert job_id not in after


def test_readiness_does_not_depend_on_relays_or_consumers(client: TestClient) -> None:
    """/readyz is about the api: with no relay or consumer alive it still takes jobs (the outbox keeps
    them)."""
    assert client.get("/readyz").status_code == 200


def test_the_openapi_document_describes_every_route_with_problem_errors_and_bounded_statuses(
    client: TestClient,
) -> None:
    document = client.get("/openapi.json").json()
    operations = {
        (method.upper(), path): operation
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }
    assert {
        ("POST", "/jobs"),
        ("GET", "/jobs"),
        ("GET", "/jobs/{job_id}"),
        ("POST", "/jobs/{job_id}/cancel"),
        ("GET", "/jobs/{job_id}/result"),
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/metrics"),
    } <= set(operations)
    for key, operation in operations.items():
        # 403 is the signed result link's alone.
        allowed = ALLOWED_STATUSES | ({"403"} if key == ("GET", "/jobs/{job_id}/result") else set())
        assert set(operation["responses"]) <= allowed, key
        for status, answer in operation["responses"].items():
            if status.startswith(("4", "5")):
                schema = answer["content"]["application/problem+json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/Problem"}, key
    submit = operations[("POST", "/jobs")]["responses"]
    assert {"202", "400", "401", "409", "413", "503"} <= set(submit)
    assert "Location" in submit["202"]["headers"]
    problem = document["components"]["schemas"]["Problem"]
    assert {"type", "title", "status", "detail"} <= set(problem["required"])
    assert "HTTPValidationError" not in document["components"]["schemas"]
    schemas = document["components"]["schemas"]
    mapping = schemas["JobCreate"]["discriminator"]["mapping"]
    assert set(mapping) == {"export", "document", "notify", "noop", "sleep", "flaky"}
    export = schemas["JobCreate_export"]["properties"]
    assert export["kind"]["const"] == "export"
    assert export["payload"] == {"$ref": "#/components/schemas/Payload_export"}
    assert {"rows", "chunk"} <= set(schemas["Payload_export"]["properties"])


def test_the_api_serves_without_the_dashboard_module(
    settings: Settings, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The import machinery now finds no such module.
    monkeypatch.setitem(sys.modules, "outbox_bridge.api.dashboard", None)
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/ui").status_code == 404


@pytest.fixture
def read_only_store(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    """The app on a store that answers reads and refuses every write, as a store does that went read-only:
    each connection the app opens is made read-only by the database itself."""

    def read_only(dbapi_connection: Any, _record: object) -> None:
        if settings.is_sqlite:
            dbapi_connection.execute("PRAGMA query_only = ON")
        else:
            dbapi_connection.execute("SET default_transaction_read_only = on")
            dbapi_connection.commit()

    event.listen(Engine, "connect", read_only)
    try:
        with TestClient(create_app(settings)) as test_client:
            yield test_client
    finally:
        event.remove(Engine, "connect", read_only)


def test_a_read_only_store_is_ready_to_read_and_not_to_write(
    read_only_store: TestClient, settings: Settings
) -> None:
    token = issue_token(settings.auth_secret, tenant="t", user="u")
    submitted = read_only_store.post(
        "/jobs",
        json={"kind": "noop", "payload": {}},
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": "k"},
    )
    assert submitted.status_code == 503
    assert read_only_store.get("/readyz").status_code == 200
    refused = read_only_store.get("/readyz", params={"write": "true"})
    assert refused.status_code == 503 and refused.headers["content-type"] == "application/problem+json"


def test_a_writable_store_is_ready_to_write(client: TestClient) -> None:
    assert client.get("/readyz", params={"write": "true"}).json() == {"status": "ready"}

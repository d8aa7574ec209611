"""Signed result links through the real app on a real store: a job view's `result_url` serves the committed
result without a bearer token until it expires, and nothing else: not an altered link, not another job's
result, not a job the retention removed."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.clock import FakeClock, isoformat
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.base import file_output
from outbox_bridge.jobstore import db, fenced, retention
from tests.support.store import claimed, job_row, new_job

PROBLEM = "urn:outbox-bridge:problem:"
LINK_SECONDS = 900  # the default RESULT_LINK_SECONDS


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def bearer(settings: Settings, tenant: str = "acme") -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(settings.auth_secret, tenant=tenant, user='alice')}"}


def succeeded(engine: Engine, clock: FakeClock, output: dict[str, Any], tenant: str = "acme") -> str:
    """A job of `tenant` whose one attempt committed `output`."""
    job_id = new_job(engine, f"k-{uuid.uuid4().hex[:8]}", tenant=tenant)
    taken = claimed(engine, job_id)
    db.transact(engine, fenced.complete, job_id, taken.epoch, taken.attempt_id, output, clock.now())
    return job_id


def view(client: TestClient, settings: Settings, job_id: str, tenant: str = "acme") -> dict[str, Any]:
    response = client.get(f"/jobs/{job_id}", headers=bearer(settings, tenant))
    assert response.status_code == 200, response.text
    return response.json()


def with_query(url: str, **changes: str | None) -> str:
    """`url` with its query parameters changed (None: left out)."""
    parts = urlsplit(url)
    query = {name: values[0] for name, values in parse_qs(parts.query).items()}
    query.update(changes)
    kept = "&".join(f"{name}={value}" for name, value in query.items() if value is not None)
    return f"{parts.path}?{kept}"


def assert_problem(response: Any, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert (problem["type"], problem["status"]) == (PROBLEM + slug, status)
    return problem


def test_a_succeeded_jobs_link_serves_its_result_file_without_authorization_and_logs_no_signature(
    client: TestClient,
    engine: Engine,
    settings: Settings,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    job_id = new_job(engine, "k-file", kind="export", payload={"rows": 1, "chunk": 1})
    taken = claimed(engine, job_id)
    relative = f"{job_id}/{taken.attempt_id}.csv"
    (settings.results_dir / job_id).mkdir(parents=True)
    (settings.results_dir / relative).write_bytes(b"id\n1\n")
    output = file_output(relative, "text/csv")
    db.transact(engine, fenced.complete, job_id, taken.epoch, taken.attempt_id, output, clock.now())

    job = view(client, settings, job_id)
    url = job["result_url"]
    sig = parse_qs(urlsplit(url).query)["sig"][0]
    with caplog.at_level(logging.DEBUG):
        response = client.get(url)

    assert urlsplit(url).path == f"/jobs/{job_id}/result"
    assert parse_qs(urlsplit(url).query)["expires"] == [str(int(clock.now()) + LINK_SECONDS)]
    assert job["result_expires_at"] == isoformat(int(clock.now()) + LINK_SECONDS)
    assert response.status_code == 200
    assert response.content == b"id\n1\n"
    assert response.headers["content-disposition"] == f'attachment; filename="export-{job_id}.csv"'
    assert response.headers["cache-control"] == "no-store"
    # The test client logs the URL it asked for; the app and the server must not.
    server_side = [r.getMessage() for r in caplog.records if not r.name.startswith("httpx")]
    assert server_side == [] or all(sig not in message for message in server_side)


def test_an_expired_link_is_403_saying_to_read_the_job_again_which_gives_a_fresh_one_and_reruns_nothing(
    client: TestClient, engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    job_id = succeeded(engine, clock, {"answer": 42})
    before = view(client, settings, job_id)
    clock.advance(LINK_SECONDS - 1)
    assert client.get(before["result_url"]).json() == {"answer": 42}
    clock.advance(1)

    problem = assert_problem(client.get(before["result_url"]), 403, "result-link-expired")
    again = view(client, settings, job_id)

    assert f"GET /jobs/{job_id}" in problem["detail"]
    assert problem["job_url"] == f"/jobs/{job_id}"
    assert again["result_url"] != before["result_url"]
    assert client.get(again["result_url"]).json() == {"answer": 42}
    unchanged = ("state", "attempts", "updated_at")
    assert {k: again[k] for k in unchanged} == {k: before[k] for k in unchanged}
    assert job_row(engine, job_id).epoch == 1


def test_reading_the_job_twice_gives_two_links_that_each_work_until_their_own_expiry(
    client: TestClient, engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    job_id = succeeded(engine, clock, {"answer": 42})
    first = view(client, settings, job_id)["result_url"]
    clock.advance(60)
    second = view(client, settings, job_id)["result_url"]
    assert first != second
    assert client.get(first).json() == client.get(second).json() == {"answer": 42}

    clock.advance(LINK_SECONDS - 60)
    assert_problem(client.get(first), 403, "result-link-expired")
    assert client.get(second).json() == {"answer": 42}
    clock.advance(60)
    assert_problem(client.get(second), 403, "result-link-expired")


def test_an_altered_link_or_one_moved_to_another_job_is_403_invalid(
    client: TestClient, engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    job_id = succeeded(engine, clock, {"mine": True})
    same_tenant = succeeded(engine, clock, {"same tenant": True})
    other_tenant = succeeded(engine, clock, {"other tenant": True}, tenant="globex")
    running = new_job(engine, "k-running")
    claimed(engine, running)
    url = view(client, settings, job_id)["result_url"]
    query = parse_qs(urlsplit(url).query)
    sig, expires = query["sig"][0], int(query["expires"][0])
    flipped = ("B" if sig[0] == "A" else "A") + sig[1:]

    altered = {
        "sig": with_query(url, sig=flipped),
        "sig cut short": with_query(url, sig=sig[:-1]),
        "sig padded": with_query(url, sig=sig + "="),
        "expires later": with_query(url, expires=str(expires + 3600)),
        "expires earlier": with_query(url, expires=str(expires - LINK_SECONDS - 1)),
        "expires with a leading zero": with_query(url, expires=f"0{expires}"),
        "expires not a number": with_query(url, expires="soon"),
        "no sig": with_query(url, sig=None),
        "no expires": with_query(url, expires=None),
        "same tenant's job": url.replace(job_id, same_tenant),
        "other tenant's job": url.replace(job_id, other_tenant),
        "a job with no result yet": url.replace(job_id, running),
    }
    for what, link in altered.items():
        problem = assert_problem(client.get(link), 403, "result-link-invalid")
        assert "mine" not in problem["detail"] and "tenant" not in problem["detail"], what
    assert client.get(url).json() == {"mine": True}


def test_a_link_to_a_job_the_retention_removed_is_404_as_an_id_never_issued(
    client: TestClient, engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    job_id = succeeded(engine, clock, {"answer": 42})
    url = view(client, settings, job_id)["result_url"]
    clock.advance(1)
    assert db.transact(engine, retention.prune, clock.now()) == [job_id]

    pruned = client.get(url)
    never = client.get(url.replace(job_id, str(uuid.uuid4())))

    assert_problem(pruned, 404, "job-not-found")
    assert pruned.content == never.content


def test_a_request_with_an_authorization_header_is_decided_by_its_token_and_not_the_link(
    client: TestClient, engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    job_id = succeeded(engine, clock, {"answer": 42})
    url = view(client, settings, job_id)["result_url"]
    broken = with_query(url, sig="x")

    assert client.get(broken, headers=bearer(settings)).json() == {"answer": 42}
    assert_problem(client.get(url, headers=bearer(settings, "globex")), 404, "job-not-found")
    assert_problem(client.get(url, headers={"Authorization": "Bearer nope"}), 401, "unauthorized")
    assert_problem(client.get(url, headers={"Authorization": "Basic YTpi"}), 401, "unauthorized")
    assert_problem(client.get(f"/jobs/{job_id}/result"), 401, "unauthorized")
    documented = client.get("/openapi.json").json()["paths"]["/jobs/{job_id}/result"]["get"]
    assert documented["security"] == [{"HTTPBearer": []}, {}]


def test_a_link_signed_under_another_auth_secret_is_invalid(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    job_id = succeeded(engine, clock, {"answer": 42})
    rotated = settings.model_copy(update={"auth_secret": settings.auth_secret + "-rotated"})
    with TestClient(create_app(settings)) as old, TestClient(create_app(rotated)) as new:
        url = view(old, settings, job_id)["result_url"]
        assert_problem(new.get(url), 403, "result-link-invalid")
        assert new.get(view(new, rotated, job_id)["result_url"]).json() == {"answer": 42}

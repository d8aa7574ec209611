"""Cross-tenant probes: tenant B cannot read, list, cancel or fetch the result of tenant A's job, and cannot
tell that it exists: every answer is byte for byte the answer for an id that was never issued."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import claiming, db, fenced, queries
from outbox_bridge.jobstore.states import State


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def bearer(settings: Settings, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(settings.auth_secret, tenant=tenant, user='someone')}"}


@pytest.fixture
def a_job(client: TestClient, settings: Settings, engine: Engine, clock: FakeClock) -> str:
    """Tenant A's job, succeeded with a committed result."""
    headers = {**bearer(settings, "tenant-a"), "Idempotency-Key": "a-1"}
    job_id: str = client.post("/jobs", json={"kind": "noop", "payload": {}}, headers=headers).json()["id"]
    claim = db.transact(engine, claiming.claim, job_id, "worker", clock.now(), 30.0).claim
    assert claim is not None
    db.transact(engine, fenced.complete, job_id, claim.epoch, claim.attempt_id, {"secret": "a"}, clock.now())
    return job_id


@pytest.mark.parametrize(
    "method,template",
    [("GET", "/jobs/{id}"), ("POST", "/jobs/{id}/cancel"), ("GET", "/jobs/{id}/result")],
    ids=["read", "cancel", "result"],
)
def test_another_tenants_job_answers_exactly_as_an_unknown_id(
    client: TestClient, settings: Settings, a_job: str, method: str, template: str
) -> None:
    as_b = bearer(settings, "tenant-b")
    theirs = client.request(method, template.format(id=a_job), headers=as_b)
    unknown = client.request(method, template.format(id=str(uuid.uuid4())), headers=as_b)
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.content == unknown.content
    assert theirs.headers == unknown.headers
    assert a_job not in theirs.text
    owner_view = client.request(method, template.format(id=a_job), headers=bearer(settings, "tenant-a"))
    assert owner_view.status_code == 200


def test_another_tenants_cancel_changes_nothing(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    headers = {**bearer(settings, "tenant-a"), "Idempotency-Key": "a-2"}
    job_id = client.post("/jobs", json={"kind": "noop", "payload": {}}, headers=headers).json()["id"]
    assert client.post(f"/jobs/{job_id}/cancel", headers=bearer(settings, "tenant-b")).status_code == 404
    job = db.read(engine, queries.get_job, job_id)
    assert job is not None
    assert job.state is State.QUEUED and not job.cancel_requested


def test_listing_shows_only_the_callers_tenant(client: TestClient, settings: Settings, a_job: str) -> None:
    headers = {**bearer(settings, "tenant-b"), "Idempotency-Key": "b-1"}
    b_job = client.post("/jobs", json={"kind": "noop", "payload": {}}, headers=headers).json()["id"]
    listed = client.get("/jobs", headers=bearer(settings, "tenant-b")).json()
    assert [item["id"] for item in listed["items"]] == [b_job]
    succeeded = client.get(
        "/jobs", params={"state": "succeeded"}, headers=bearer(settings, "tenant-b")
    ).json()
    assert succeeded == {"items": [], "next_cursor": None}

"""`POST /jobs` with `after`, through the real app on a real store: the job waits `queued`, its view listing
what it still waits for, becomes due when they have succeeded, is cancelled (`dependency_failed`) when one
of them does not unless it asked to run; an id its tenant does not have is 400 and writes nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from outbox_bridge.api.app import create_app
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore.schema import WAITING_AT
from outbox_bridge.jobstore.states import State
from tests.support.store import job_row
from tests.support.workflow_api import fail, headers, rows, succeed


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def submit(client: TestClient, settings: Settings, key: str, tenant: str = "acme", **fields: Any) -> Any:
    body = {"kind": "noop", "payload": {}, **fields}
    return client.post("/jobs", json=body, headers=headers(settings, tenant, key))


def job_id(client: TestClient, settings: Settings, key: str, tenant: str = "acme") -> str:
    response = submit(client, settings, key, tenant)
    assert response.status_code == 202, response.text
    found: str = response.json()["id"]
    return found


def view(client: TestClient, settings: Settings, of: str) -> dict[str, Any]:
    response = client.get(f"/jobs/{of}", headers=headers(settings))
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def test_a_job_after_others_waits_listing_them_and_is_due_once_they_have_succeeded(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    first, second = job_id(client, settings, "first"), job_id(client, settings, "second")
    accepted = submit(client, settings, "then", after=[second, first])
    assert accepted.status_code == 202, accepted.text
    then = accepted.json()
    assert accepted.headers["location"] == f"/jobs/{then['id']}"
    assert (then["state"], sorted(then["waiting_for"]), then["callback_of"]) == (
        "queued",
        sorted([first, second]),
        None,
    )
    assert job_row(engine, then["id"]).available_at == WAITING_AT
    assert sorted(view(client, settings, then["id"])["waiting_for"]) == sorted([first, second])
    assert view(client, settings, first)["waiting_for"] == []

    clock.advance(1)
    succeed(engine, clock, first)
    assert view(client, settings, then["id"])["waiting_for"] == [second]
    listed = {item["id"]: item for item in client.get("/jobs", headers=headers(settings)).json()["items"]}
    assert (listed[then["id"]]["waiting_for"], listed[first]["waiting_for"]) == ([second], [])

    clock.advance(1)
    succeed(engine, clock, second)
    due = view(client, settings, then["id"])
    assert (due["state"], due["waiting_for"], due["waited_seconds"]) == ("queued", [], 0.0)
    assert job_row(engine, then["id"]).available_at == clock.now()


def test_a_failed_dependency_cancels_the_job_unless_it_asked_to_run(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    first = job_id(client, settings, "first")
    cancelled = submit(client, settings, "cancelled", after=[first]).json()["id"]
    runs = submit(client, settings, "runs", after=[first], on_dependency_failure="run").json()["id"]
    clock.advance(1)
    fail(engine, clock, first)
    gone = view(client, settings, cancelled)
    assert (gone["state"], gone["error"]["code"], gone["waiting_for"]) == (
        "cancelled",
        "dependency_failed",
        [],
    )
    due = view(client, settings, runs)
    assert (due["state"], due["waiting_for"], due["error"]) == ("queued", [], None)


def test_after_a_job_that_already_failed_the_new_job_is_answered_cancelled(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    first = job_id(client, settings, "first")
    fail(engine, clock, first)
    answer = submit(client, settings, "late", after=[first]).json()
    assert (answer["state"], answer["error"]["code"], answer["waiting_for"]) == (
        "cancelled",
        "dependency_failed",
        [],
    )


def test_an_after_naming_another_tenants_job_is_400_as_an_unknown_id_and_writes_nothing(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    mine = job_id(client, settings, "mine")
    theirs = job_id(client, settings, "theirs", tenant="other")
    before = rows(engine)
    foreign = submit(client, settings, "after-theirs", after=[mine, theirs])
    unknown_id = str(uuid.uuid4())
    unknown = submit(client, settings, "after-theirs", after=[mine, unknown_id])
    assert foreign.status_code == unknown.status_code == 400
    assert foreign.headers["content-type"] == "application/problem+json"
    problem = foreign.json()
    assert problem["type"] == "urn:outbox-bridge:problem:invalid-request"
    assert problem["errors"] == [
        {"loc": ["body", "after", 1], "msg": "no job of your tenant", "type": "unknown_job"}
    ]
    assert unknown.text.replace(unknown_id, theirs) == foreign.text
    assert rows(engine) == before


@pytest.mark.parametrize(
    "fields,field",
    [
        ({"after": []}, "after"),
        ({"after": [str(uuid.uuid4()) for _ in range(101)]}, "after"),
        ({"after": ["a", "a"]}, "after"),
        ({"after": "not-a-list"}, "after"),
        ({"after": [7]}, "after"),
        ({"after": ["x"], "on_dependency_failure": "maybe"}, "on_dependency_failure"),
    ],
    ids=["none", "101", "twice", "not a list", "not text", "unknown failure rule"],
)
def test_an_after_out_of_its_rules_is_400_and_writes_nothing(
    client: TestClient, settings: Settings, engine: Engine, fields: dict[str, Any], field: str
) -> None:
    before = rows(engine)
    response = submit(client, settings, "bad", **fields)
    assert response.status_code == 400, response.text
    assert response.json()["type"] == "urn:outbox-bridge:problem:invalid-request"
    assert response.json()["errors"][0]["loc"][:2] == ["body", field]
    assert rows(engine) == before


def test_the_same_key_is_the_same_job_only_with_the_same_after(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    first, second = job_id(client, settings, "first"), job_id(client, settings, "second")
    accepted = submit(client, settings, "then", after=[first, second])
    before = rows(engine)
    again = submit(client, settings, "then", after=[second, first])
    assert (again.status_code, again.json()) == (202, accepted.json())
    assert again.headers["location"] == accepted.headers["location"]
    for other in ({"after": [first]}, {"after": [first, second], "on_dependency_failure": "run"}, {}):
        conflict = submit(client, settings, "then", **other)
        assert conflict.status_code == 409, other
        assert conflict.json()["job_url"] == f"/jobs/{accepted.json()['id']}"
    assert rows(engine) == before


def test_a_job_without_after_has_empty_workflow_fields(client: TestClient, settings: Settings) -> None:
    answer = submit(client, settings, "plain").json()
    assert (answer["waiting_for"], answer["callback_of"]) == ([], None)
    cancelled = client.post(f"/jobs/{answer['id']}/cancel", headers=headers(settings)).json()
    assert (cancelled["state"], cancelled["waiting_for"], cancelled["callback_of"]) == ("cancelled", [], None)


def test_a_waiting_job_cancelled_lists_nothing_to_wait_for(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    first = job_id(client, settings, "first")
    then = submit(client, settings, "then", after=[first]).json()["id"]
    cancelled = client.post(f"/jobs/{then}/cancel", headers=headers(settings))
    assert cancelled.status_code == 200
    assert (cancelled.json()["state"], cancelled.json()["waiting_for"]) == ("cancelled", [])
    assert job_row(engine, first).state is State.QUEUED

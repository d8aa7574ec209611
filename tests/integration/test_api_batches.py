"""`/batches` through the real app on a real store: a batch accepted in one transaction (or not at all),
its key's replay and conflict, reading, listing and cancelling it in its tenant only, and the batch done
with its callback job, whose view names the batch, once its last member has ended."""

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
from outbox_bridge.jobstore.states import State
from tests.support.store import claimed, job_row
from tests.support.workflow_api import fail, headers, rows, succeed

BATCH_KEYS = {"id", "state", "jobs", "counts", "callback_job_id", "created_at", "done_at"}
NOOP = {"kind": "noop", "payload": {}}
PROBLEM = "urn:outbox-bridge:problem:"


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def post_batch(
    client: TestClient, settings: Settings, key: str, body: dict[str, Any], tenant: str = "acme"
) -> Any:
    return client.post("/batches", json=body, headers=headers(settings, tenant, key))


def a_batch(
    client: TestClient,
    settings: Settings,
    key: str,
    size: int = 2,
    tenant: str = "acme",
    callback: bool = True,
) -> dict[str, Any]:
    body: dict[str, Any] = {"jobs": [{"kind": "noop", "payload": {}, "priority": "high"}] * size}
    if callback:
        body["callback"] = {"kind": "sleep", "payload": {"seconds": 0}, "deadline_seconds": 60}
    response = post_batch(client, settings, key, body, tenant)
    assert response.status_code == 202, response.text
    found: dict[str, Any] = response.json()
    return found


def get(client: TestClient, settings: Settings, path: str, tenant: str = "acme") -> Any:
    return client.get(path, headers=headers(settings, tenant))


def test_a_batch_is_accepted_whole_and_answered_202_with_its_view_and_location(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    response = post_batch(client, settings, "b-1", {"jobs": [NOOP, NOOP, NOOP], "callback": NOOP})
    assert response.status_code == 202, response.text
    batch = response.json()
    assert set(batch) == BATCH_KEYS
    assert response.headers["location"] == f"/batches/{batch['id']}"
    assert response.headers["cache-control"] == "no-store"
    assert (batch["state"], batch["counts"], batch["callback_job_id"], batch["done_at"]) == (
        "running",
        {"queued": 3},
        None,
        None,
    )
    assert batch["created_at"] == "2023-11-14T22:13:20.000Z"
    assert len(batch["jobs"]) == len(set(batch["jobs"])) == 3
    for member in batch["jobs"]:
        job = get(client, settings, f"/jobs/{member}").json()
        assert (job["state"], job["waiting_for"], job["callback_of"]) == ("queued", [], None)
    assert rows(engine) | {"job_dependencies": 0} == {
        "jobs": 3, "outbox": 3, "job_dependencies": 0, "job_waits": 0, "batches": 1, "batch_members": 3,
        "batch_callbacks": 1,
    }  # fmt: skip
    assert get(client, settings, f"/batches/{batch['id']}").json() == batch


def test_the_same_key_and_body_is_the_same_batch_and_another_body_is_409(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    body = {"jobs": [NOOP, {"kind": "sleep", "payload": {"seconds": 0}}], "callback": NOOP}
    first = post_batch(client, settings, "b-1", body)
    before = rows(engine)
    again = post_batch(client, settings, "b-1", body)
    assert (again.status_code, again.json(), again.headers["location"]) == (
        202,
        first.json(),
        first.headers["location"],
    )
    for other in (
        {"jobs": [{"kind": "sleep", "payload": {"seconds": 0}}, NOOP], "callback": NOOP},  # another order
        {"jobs": body["jobs"]},  # no callback
        {"jobs": body["jobs"], "callback": {"kind": "sleep", "payload": {"seconds": 0}}},
    ):
        conflict = post_batch(client, settings, "b-1", other)
        assert conflict.status_code == 409, conflict.text
        problem = conflict.json()
        assert (problem["type"], problem["batch_url"]) == (
            f"{PROBLEM}idempotency-conflict",
            f"/batches/{first.json()['id']}",
        )
    assert rows(engine) == before
    other_tenant = post_batch(client, settings, "b-1", body, tenant="other")
    assert other_tenant.status_code == 202 and other_tenant.json()["id"] != first.json()["id"]


@pytest.mark.parametrize(
    "body,loc",
    [
        ({"jobs": [NOOP] * 1001}, ["body", "jobs"]),
        ({"jobs": []}, ["body", "jobs"]),
        ({}, ["body", "jobs"]),
        ({"jobs": [NOOP, {"kind": "noop"}]}, ["body", "jobs", 1, "payload"]),
        ({"jobs": [NOOP], "callback": {**NOOP, "delay_seconds": 5}}, ["body", "callback", "delay_seconds"]),
        ({"jobs": [NOOP], "callback": {**NOOP, "after": [str(uuid.uuid4())]}}, ["body", "callback", "after"]),
        ({"jobs": [NOOP, {"kind": "sleep", "payload": {"seconds": "x"}}]}, ["body", "jobs", 1, "payload"]),
        ({"jobs": [NOOP, {**NOOP, "run_at": "2020-01-01T00:00:00Z"}]}, ["body", "jobs", 1, "run_at"]),
    ],
    ids=["1001 jobs", "no job", "no jobs field", "a member without payload", "a delayed callback",
         "a callback with after", "a member's payload", "a member's start"],
)  # fmt: skip
def test_a_batch_out_of_its_rules_is_400_and_writes_nothing(
    client: TestClient, settings: Settings, engine: Engine, body: dict[str, Any], loc: list[Any]
) -> None:
    before = rows(engine)
    response = post_batch(client, settings, "bad", body)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["errors"][0]["loc"][: len(loc)] == loc
    assert rows(engine) == before


def test_a_member_of_a_kind_not_accepted_is_named_by_its_index(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    before = rows(engine)
    response = post_batch(client, settings, "bad", {"jobs": [NOOP, NOOP, {"kind": "nope", "payload": {}}]})
    assert response.status_code == 400
    problem = response.json()
    assert problem["type"] == f"{PROBLEM}unknown-kind"
    assert problem["detail"].startswith("jobs[2]: ")
    assert rows(engine) == before


def test_a_batch_of_1000_is_accepted(client: TestClient, settings: Settings, engine: Engine) -> None:
    batch = a_batch(client, settings, "big", size=1000, callback=False)
    assert (len(batch["jobs"]), batch["counts"]) == (1000, {"queued": 1000})
    assert rows(engine)["outbox"] == 1000


def test_a_member_may_wait_for_an_earlier_job_of_its_tenant_only(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    first = client.post("/jobs", json=NOOP, headers=headers(settings, key="first")).json()["id"]
    theirs = client.post("/jobs", json=NOOP, headers=headers(settings, "other", "theirs")).json()["id"]
    before = rows(engine)
    refused = post_batch(client, settings, "b", {"jobs": [NOOP, {**NOOP, "after": [first, theirs]}]})
    assert refused.status_code == 400, refused.text
    assert refused.json()["detail"].startswith("jobs[1]: ")
    assert refused.json()["errors"][0]["loc"] == ["body", "jobs", 1, "after", 1]
    assert rows(engine) == before

    batch = post_batch(client, settings, "b", {"jobs": [NOOP, {**NOOP, "after": [first]}]}).json()
    waiting = get(client, settings, f"/jobs/{batch['jobs'][1]}").json()
    assert (waiting["state"], waiting["waiting_for"]) == ("queued", [first])
    succeed(engine, clock, first)
    assert get(client, settings, f"/jobs/{batch['jobs'][1]}").json()["waiting_for"] == []


def test_a_batch_whose_members_all_end_is_done_with_its_callback_naming_it(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    batch = a_batch(client, settings, "b", size=3)
    first, second, third = batch["jobs"]
    succeed(engine, clock, first)
    fail(engine, clock, second)
    running = get(client, settings, f"/batches/{batch['id']}").json()
    assert (running["state"], running["counts"]) == ("running", {"succeeded": 1, "failed": 1, "queued": 1})
    clock.advance(2.5)
    succeed(engine, clock, third)

    done = get(client, settings, f"/batches/{batch['id']}").json()
    assert (done["state"], done["counts"], done["done_at"]) == (
        "done",
        {"succeeded": 2, "failed": 1},
        "2023-11-14T22:13:22.500Z",
    )
    callback_id = done["callback_job_id"]
    assert callback_id is not None and callback_id not in done["jobs"]
    callback = get(client, settings, f"/jobs/{callback_id}").json()
    assert (callback["kind"], callback["state"], callback["callback_of"], callback["waiting_for"]) == (
        "sleep",
        "queued",
        batch["id"],
        [],
    )
    assert callback["deadline_at"] == "2023-11-14T22:14:22.500Z"
    listed = {item["id"]: item for item in get(client, settings, "/jobs").json()["items"]}
    assert listed[callback_id]["callback_of"] == batch["id"]
    assert {listed[member]["callback_of"] for member in batch["jobs"]} == {None}
    assert get(client, settings, f"/jobs/{callback_id}", tenant="other").status_code == 404


def test_a_key_of_the_stores_own_batch_form_is_refused_and_writes_nothing(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    """A request's key may not take the key a batch's callback is inserted under when its last member ends
    (that ending would then fail on the key): `batch:` keys are refused."""
    batch = a_batch(client, settings, "b", size=1)
    before = rows(engine)
    for key in (f"batch:{batch['id']}:callback", f"batch:{uuid.uuid4()}:0"):
        refused = client.post("/jobs", json=NOOP, headers=headers(settings, key=key))
        assert refused.status_code == 400 and "batch:" in refused.json()["detail"]
    assert rows(engine) == before
    succeed(engine, clock, batch["jobs"][0])
    callback_id = get(client, settings, f"/batches/{batch['id']}").json()["callback_job_id"]
    assert get(client, settings, f"/jobs/{callback_id}").json()["callback_of"] == batch["id"]


def test_another_tenants_batch_answers_exactly_as_an_unknown_id(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    batch = a_batch(client, settings, "b")
    before = rows(engine)
    for method, template in (("GET", "/batches/{id}"), ("POST", "/batches/{id}/cancel")):
        theirs = client.request(method, template.format(id=batch["id"]), headers=headers(settings, "other"))
        unknown = client.request(method, template.format(id=uuid.uuid4()), headers=headers(settings, "other"))
        assert theirs.status_code == unknown.status_code == 404
        assert (theirs.content, theirs.headers) == (unknown.content, unknown.headers)
        assert theirs.json()["type"] == f"{PROBLEM}batch-not-found"
    assert rows(engine) == before
    assert get(client, settings, "/batches", tenant="other").json() == {"items": [], "next_cursor": None}


def test_batches_are_listed_newest_first_a_page_at_a_time_and_by_state(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    made = []
    for i in range(5):
        made.append(a_batch(client, settings, f"b-{i}", size=1))
        clock.advance(1)
    a_batch(client, settings, "theirs", tenant="other")
    seen: list[str] = []
    cursor = None
    while True:
        page = get(client, settings, "/batches?limit=2" + (f"&cursor={cursor}" if cursor else "")).json()
        assert len(page["items"]) <= 2
        seen.extend(item["id"] for item in page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [b["id"] for b in reversed(made)]
    succeed(engine, clock, made[1]["jobs"][0])
    done = get(client, settings, "/batches?state=done").json()
    assert [item["id"] for item in done["items"]] == [made[1]["id"]]
    assert done["items"][0]["state"] == "done"
    running = get(client, settings, "/batches?state=running").json()["items"]
    assert made[1]["id"] not in [item["id"] for item in running] and len(running) == 4
    for query in ("state=finished", "limit=0", "limit=101", "cursor=bm90LWEtY3Vyc29y"):
        refused = get(client, settings, f"/batches?{query}")
        assert refused.status_code == 400, query
    assert get(client, settings, "/batches?cursor=bm90LWEtY3Vyc29y").json()["type"] == f"{PROBLEM}bad-cursor"


def test_cancelling_a_batch_cancels_its_queued_members_requests_its_running_ones_and_leaves_ended_ones(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    batch = a_batch(client, settings, "b", size=3)
    ended, running, queued = batch["jobs"]
    succeed(engine, clock, ended)
    claimed(engine, running, now=clock.now())
    answer = client.post(f"/batches/{batch['id']}/cancel", headers=headers(settings))
    assert answer.status_code == 202, answer.text
    view = answer.json()
    assert (view["state"], view["counts"]) == ("running", {"succeeded": 1, "running": 1, "cancelled": 1})
    assert job_row(engine, queued).state is State.CANCELLED
    assert job_row(engine, running).cancel_requested
    assert job_row(engine, ended).state is State.SUCCEEDED


def test_cancelling_a_batch_of_queued_members_ends_it_and_its_callback_is_accepted(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    batch = a_batch(client, settings, "b", size=2)
    answer = client.post(f"/batches/{batch['id']}/cancel", headers=headers(settings))
    assert answer.status_code == 200, answer.text
    view = answer.json()
    assert (view["state"], view["counts"]) == ("done", {"cancelled": 2})
    assert view["callback_job_id"] is not None
    assert job_row(engine, view["callback_job_id"]).state is State.QUEUED
    again = client.post(f"/batches/{batch['id']}/cancel", headers=headers(settings))
    assert (again.status_code, again.json()) == (200, view)


def test_the_document_describes_batches_and_the_workflow_fields(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    assert {"/batches", "/batches/{batch_id}", "/batches/{batch_id}/cancel"} <= set(document["paths"])
    assert set(document["paths"]["/batches"]) == {"get", "post"}
    schemas = document["components"]["schemas"]
    assert {"waiting_for", "callback_of"} <= set(schemas["JobView"]["required"])
    assert {"after", "on_dependency_failure"} <= set(schemas["JobCreate_noop"]["properties"])
    assert set(schemas["BatchView"]["required"]) == BATCH_KEYS
    assert "batch_url" in schemas["Problem"]["properties"]

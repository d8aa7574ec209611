"""The job routes through the real app on a real store: submission and idempotency, reading, listing,
cancelling, and fetching the committed result."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.clock import isoformat as clock_iso
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.base import file_output
from outbox_bridge.jobstore import db, fenced, operator, queries, sweeper
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.schema import jobs, outbox
from outbox_bridge.jobstore.states import State
from tests.support.store import LEASE, claimed

VIEW_KEYS = {
    "id",
    "kind",
    "state",
    "attempts",
    "created_at",
    "updated_at",
    "deadline_at",
    "run_at",
    "queue",
    "priority",
    "schedule",
    "callback_of",
    "concurrency_key",
    "held_by",
    "waiting_for",
    "cancel_requested",
    "progress",
    "waited_seconds",
    "running_since",
    "result_url",
    "result_expires_at",
    "error",
}


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture
def auth(settings: Settings) -> Callable[..., dict[str, str]]:
    def headers(tenant: str = "acme", user: str = "alice", key: str | None = None) -> dict[str, str]:
        token = issue_token(settings.auth_secret, tenant=tenant, user=user)
        found = {"Authorization": f"Bearer {token}"}
        if key is not None:
            found["Idempotency-Key"] = key
        return found

    return headers


def counts(engine: Engine) -> tuple[int, int]:
    """(job rows, outbox rows)."""
    with engine.connect() as conn:
        return (
            conn.execute(select(func.count()).select_from(jobs)).scalar_one(),
            conn.execute(select(func.count()).select_from(outbox)).scalar_one(),
        )


def submit(client: TestClient, headers: dict[str, str], kind: str = "noop", **payload: Any) -> Any:
    return client.post("/jobs", json={"kind": kind, "payload": payload}, headers=headers)


def complete(engine: Engine, taken: Claim, clock: FakeClock, output: dict[str, Any]) -> None:
    db.transact(engine, fenced.complete, taken.job_id, taken.epoch, taken.attempt_id, output, clock.now())


def test_a_new_job_is_committed_with_its_outbox_row_and_answered_202_with_its_location(
    client: TestClient, engine: Engine, auth: Callable[..., dict[str, str]], clock: FakeClock
) -> None:
    response = client.post(
        "/jobs",
        json={"kind": "sleep", "payload": {"seconds": 0.5}, "deadline_seconds": 60},
        headers=auth(key="k-1"),
    )
    assert response.status_code == 202
    view = response.json()
    assert set(view) == VIEW_KEYS
    assert response.headers["location"] == f"/jobs/{view['id']}"
    assert view["kind"] == "sleep"
    assert view["state"] == "queued"
    assert view["attempts"] == 0
    assert view["queue"] == "default"
    assert view["cancel_requested"] is False
    assert view["result_url"] is None and view["error"] is None
    assert view["created_at"] == "2023-11-14T22:13:20.000Z"
    assert view["deadline_at"] == "2023-11-14T22:14:20.000Z"
    assert (view["progress"], view["waited_seconds"]) == (None, 0.0)
    assert counts(engine) == (1, 1)


def test_the_same_key_and_payload_returns_the_original_job_and_writes_nothing_more(
    client: TestClient, engine: Engine, auth: Callable[..., dict[str, str]]
) -> None:
    first = submit(client, auth(key="k-1"), n=1)
    again = submit(client, auth(key="k-1"), n=1)
    assert again.status_code == 202
    assert again.json() == first.json()
    assert again.headers["location"] == first.headers["location"]
    assert counts(engine) == (1, 1)


@pytest.mark.parametrize(
    "second",
    [
        {"kind": "noop", "payload": {"n": 2}},
        {"kind": "sleep", "payload": {"seconds": 1}},
        {"kind": "noop", "payload": {"n": 1}, "deadline_seconds": 60},
    ],
    ids=["other-payload", "other-kind", "a-deadline-added"],
)
def test_the_same_key_for_a_different_request_is_409_naming_the_original_job(
    client: TestClient, engine: Engine, auth: Callable[..., dict[str, str]], second: dict[str, Any]
) -> None:
    original = submit(client, auth(key="k-1"), n=1).json()
    response = client.post("/jobs", json=second, headers=auth(key="k-1"))
    assert response.status_code == 409
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == "urn:outbox-bridge:problem:idempotency-conflict"
    assert problem["job_url"] == f"/jobs/{original['id']}"
    assert counts(engine) == (1, 1)


def test_the_same_key_with_another_deadline_is_409_and_with_the_same_one_the_original_job(
    client: TestClient, engine: Engine, auth: Callable[..., dict[str, str]]
) -> None:
    body = {"kind": "noop", "payload": {"n": 1}, "deadline_seconds": 60}
    original = client.post("/jobs", json=body, headers=auth(key="k-1"))
    same = client.post("/jobs", json=body, headers=auth(key="k-1"))
    other = client.post("/jobs", json={**body, "deadline_seconds": 3600}, headers=auth(key="k-1"))
    none = client.post("/jobs", json={"kind": "noop", "payload": {"n": 1}}, headers=auth(key="k-1"))
    assert (original.status_code, same.status_code) == (202, 202)
    assert same.json()["id"] == original.json()["id"]
    assert (other.status_code, none.status_code) == (409, 409)
    assert other.json()["job_url"] == f"/jobs/{original.json()['id']}"
    assert counts(engine) == (1, 1)


@pytest.mark.parametrize(
    "kind,first,second",
    [
        ("sleep", {"seconds": 0}, {"seconds": 0.0}),
        ("sleep", {"seconds": 2}, {"seconds": 2.0}),
        ("document", {"document": "Q3 report"}, {"document": "Q3 report", "instructions": None}),
        ("flaky", {}, {"fail_until_attempt": 1_000_000, "mode": "transient"}),
    ],
    ids=["zero", "whole-number", "default-left-out", "all-defaults"],
)
def test_payloads_that_validate_to_the_same_job_are_the_same_request(
    client: TestClient,
    engine: Engine,
    auth: Callable[..., dict[str, str]],
    kind: str,
    first: dict[str, Any],
    second: dict[str, Any],
) -> None:
    original = submit(client, auth(key="k-1"), kind, **first)
    again = submit(client, auth(key="k-1"), kind, **second)
    assert (original.status_code, again.status_code) == (202, 202)
    assert again.json()["id"] == original.json()["id"]
    assert counts(engine) == (1, 1)


def test_the_priority_is_stored_shown_and_part_of_the_request_under_its_key(
    client: TestClient, engine: Engine, auth: Callable[..., dict[str, str]]
) -> None:
    body = {"kind": "noop", "payload": {"n": 1}}
    plain = client.post("/jobs", json=body, headers=auth(key="k-plain"))
    named = client.post("/jobs", json={**body, "priority": "normal"}, headers=auth(key="k-plain"))
    high = client.post("/jobs", json={**body, "priority": "high"}, headers=auth(key="k-high"))
    same = client.post("/jobs", json={**body, "priority": "high"}, headers=auth(key="k-high"))
    low = client.post("/jobs", json={**body, "priority": "low"}, headers=auth(key="k-high"))
    unnamed = client.post("/jobs", json=body, headers=auth(key="k-high"))

    assert (plain.status_code, named.status_code, high.status_code, same.status_code) == (202,) * 4
    assert plain.json()["priority"] == "normal" and named.json()["id"] == plain.json()["id"]
    assert high.json()["priority"] == "high" and same.json()["id"] == high.json()["id"]
    assert (low.status_code, unnamed.status_code) == (409, 409)
    assert client.get(f"/jobs/{high.json()['id']}", headers=auth()).json()["priority"] == "high"
    with engine.connect() as conn:
        stored = dict(conn.execute(select(jobs.c.id, jobs.c.priority)).all())
        queued = dict(conn.execute(select(outbox.c.job_id, outbox.c.priority)).all())
    assert stored == queued == {plain.json()["id"]: 1, high.json()["id"]: 0}


def test_idempotency_keys_are_scoped_to_the_tenant(
    client: TestClient, engine: Engine, auth: Callable[..., dict[str, str]]
) -> None:
    mine = submit(client, auth("acme", key="shared"), n=1).json()
    theirs = submit(client, auth("globex", key="shared"), n=1).json()
    assert mine["id"] != theirs["id"]
    assert counts(engine) == (2, 2)


def test_owner_fields_in_the_body_are_ignored_in_favour_of_the_token(
    client: TestClient, engine: Engine, auth: Callable[..., dict[str, str]]
) -> None:
    body = {"kind": "noop", "payload": {}, "tenant": "globex", "owner": "mallory", "user": "mallory"}
    view = client.post("/jobs", json=body, headers=auth("acme", "alice", key="k-1")).json()
    job = db.read(engine, queries.get_job, view["id"])
    assert job is not None
    assert (job.tenant, job.owner) == ("acme", "alice")


def test_a_job_reads_back_as_the_same_view(client: TestClient, auth: Callable[..., dict[str, str]]) -> None:
    view = submit(client, auth(key="k-1")).json()
    response = client.get(f"/jobs/{view['id']}", headers=auth())
    assert response.status_code == 200
    assert response.json() == view


def test_listing_is_newest_first_in_pages_that_chain_by_cursor(
    client: TestClient, auth: Callable[..., dict[str, str]], clock: FakeClock
) -> None:
    ids = []
    for n in range(5):
        clock.advance(1)
        ids.append(submit(client, auth(key=f"k-{n}"), n=n).json()["id"])
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = client.get("/jobs", params=params, headers=auth()).json()
        seen += [item["id"] for item in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))
    assert pages == 3


def test_listing_filters_by_state_and_defaults_to_twenty(
    client: TestClient, engine: Engine, auth: Callable[..., dict[str, str]], clock: FakeClock
) -> None:
    for n in range(22):
        submit(client, auth(key=f"k-{n}"), n=n)
    claimed(engine, submit(client, auth(key="running"), n=99).json()["id"], "test-worker")
    assert len(client.get("/jobs", headers=auth()).json()["items"]) == 20
    running = client.get("/jobs", params={"state": "running"}, headers=auth()).json()
    assert [item["state"] for item in running["items"]] == ["running"]
    assert running["next_cursor"] is None


def test_cancelling_a_queued_job_cancels_it_at_once_and_drops_its_delivery(
    client: TestClient, engine: Engine, auth: Callable[..., dict[str, str]]
) -> None:
    view = submit(client, auth(key="k-1")).json()
    response = client.post(f"/jobs/{view['id']}/cancel", headers=auth())
    assert response.status_code == 200
    assert response.json()["state"] == "cancelled"
    assert response.json()["cancel_requested"] is True
    assert counts(engine) == (1, 0)


def test_cancelling_a_running_job_is_202_with_the_request_recorded(
    client: TestClient, engine: Engine, auth: Callable[..., dict[str, str]], clock: FakeClock
) -> None:
    view = submit(client, auth(key="k-1")).json()
    claimed(engine, view["id"], "test-worker")
    response = client.post(f"/jobs/{view['id']}/cancel", headers=auth())
    assert response.status_code == 202
    assert response.json()["state"] == "running"
    assert response.json()["cancel_requested"] is True


def test_cancelling_a_finished_job_leaves_its_committed_result_standing(
    client: TestClient, engine: Engine, auth: Callable[..., dict[str, str]], clock: FakeClock
) -> None:
    view = submit(client, auth(key="k-1")).json()
    complete(engine, claimed(engine, view["id"], "test-worker"), clock, {"ok": True})
    response = client.post(f"/jobs/{view['id']}/cancel", headers=auth())
    assert response.status_code == 200
    assert response.json()["state"] == "succeeded"
    assert response.json()["cancel_requested"] is False
    assert client.get(f"/jobs/{view['id']}/result", headers=auth()).json() == {"ok": True}


def test_a_result_is_404_until_the_job_has_succeeded_then_the_json_output(
    client: TestClient, engine: Engine, auth: Callable[..., dict[str, str]], clock: FakeClock
) -> None:
    view = submit(client, auth(key="k-1")).json()
    url = f"/jobs/{view['id']}/result"
    waiting = client.get(url, headers=auth())
    assert waiting.status_code == 404
    assert waiting.json()["type"] == "urn:outbox-bridge:problem:result-not-ready"
    complete(engine, claimed(engine, view["id"], "test-worker"), clock, {"answer": 42})
    done = client.get(url, headers=auth())
    assert done.status_code == 200
    assert done.json() == {"answer": 42}
    assert (
        client.get(f"/jobs/{view['id']}", headers=auth()).json()["result_url"].startswith(f"{url}?expires=")
    )


def test_a_failed_job_shows_its_error_and_has_no_result(
    client: TestClient, engine: Engine, auth: Callable[..., dict[str, str]], clock: FakeClock
) -> None:
    view = submit(client, auth(key="k-1")).json()
    taken = claimed(engine, view["id"], "test-worker")
    db.transact(
        engine,
        fenced.fail,
        taken.job_id,
        taken.epoch,
        taken.attempt_id,
        code="bad_input",
        message="rows must be positive",
        permanent=True,
        now=clock.now(),
        backoff=Backoff(0.0, 0.0),
    )
    failed = client.get(f"/jobs/{view['id']}", headers=auth()).json()
    assert failed["state"] == "failed"
    assert failed["error"] == {"code": "bad_input", "message": "rows must be positive"}
    assert failed["result_url"] is None
    assert client.get(f"/jobs/{view['id']}/result", headers=auth()).status_code == 404


def _write_result(settings: Settings, taken: Claim, content: bytes) -> dict[str, Any]:
    relative = f"{taken.job_id}/{taken.attempt_id}.csv"
    path = settings.results_dir / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return file_output(relative, "text/csv", bytes=len(content))


def test_a_file_result_streams_only_the_committed_attempts_file(
    client: TestClient,
    engine: Engine,
    settings: Settings,
    auth: Callable[..., dict[str, str]],
    clock: FakeClock,
) -> None:
    view = submit(client, auth(key="k-1")).json()
    stale = claimed(engine, view["id"], "test-worker", lease=5)
    _write_result(settings, stale, b"id\nstale\n")  # written, never committed: its lease runs out
    clock.advance(10)
    fresh = claimed(engine, view["id"], "test-worker")
    content = b"id,value\n" + b"".join(b"%d,%d\n" % (n, n * n) for n in range(20_000))
    complete(engine, fresh, clock, _write_result(settings, fresh, content))
    response = client.get(f"/jobs/{view['id']}/result", headers=auth())
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    assert response.content == content


def test_a_result_path_that_leads_outside_the_results_directory_is_never_served(
    client: TestClient,
    engine: Engine,
    settings: Settings,
    auth: Callable[..., dict[str, str]],
    clock: FakeClock,
) -> None:
    secret = settings.results_dir.parent / "secret.txt"
    secret.write_text("not yours")
    view = submit(client, auth(key="k-1")).json()
    complete(
        engine,
        claimed(engine, view["id"], "test-worker"),
        clock,
        file_output("../secret.txt", "text/csv"),
    )
    response = client.get(f"/jobs/{view['id']}/result", headers=auth())
    assert response.status_code == 404
    assert response.json()["type"] == "urn:outbox-bridge:problem:result-gone"
    assert "not yours" not in response.text


def test_a_job_an_operator_resolved_as_succeeded_reads_as_succeeded_and_says_why_it_has_no_result(
    client: TestClient, engine: Engine, auth: Callable[..., dict[str, str]], clock: FakeClock
) -> None:
    view = submit(client, auth(key="k-1")).json()
    taken = claimed(engine, view["id"], "test-worker")
    db.transact(
        engine, fenced.mark_external_started, taken.job_id, taken.epoch, taken.attempt_id, clock.now()
    )
    clock.advance(LEASE)
    assert db.transact(engine, sweeper.sweep_expired, clock.now(), backoff=Backoff(1.0, 1.0)) == {
        "unknown": 1
    }
    db.transact(
        engine, operator.resolve, view["id"], State.SUCCEEDED, "provider msg-7", clock.now(), actor="olga"
    )

    job = client.get(f"/jobs/{view['id']}", headers=auth()).json()
    result = client.get(f"/jobs/{view['id']}/result", headers=auth())

    assert (job["state"], job["error"], job["result_url"], job["result_expires_at"]) == (
        "succeeded",
        None,
        None,
        None,
    )
    assert result.status_code == 404
    problem = result.json()
    assert problem["type"] == "urn:outbox-bridge:problem:resolved-without-result"
    assert problem["note"] == "provider msg-7"
    assert problem["resolved_at"] == clock_iso(clock.now())
    assert "resolved this job as succeeded" in problem["detail"] and "provider msg-7" in problem["detail"]
    assert "once it has succeeded" not in problem["detail"]
    link = client.get(f"/jobs/{view['id']}/result?expires={int(clock.now()) + 900}&sig=x")
    assert (link.status_code, link.json()["type"]) == (403, "urn:outbox-bridge:problem:result-link-invalid")

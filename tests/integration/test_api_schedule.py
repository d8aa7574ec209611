"""Delayed jobs through the real app on a real store: `delay_seconds` or `run_at` on `POST /jobs`, what is
refused (and leaves nothing behind), the job view's `run_at`, idempotency over the start as named, and a
cancel before the job comes due. Then what the app refuses of a schedule (its dashboard's add form: a cron
expression that never fires or whose slots move, a time zone it does not know) and of a payload nested past
the limit, each a 400 saying why, with nothing written."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import claiming, db
from outbox_bridge.jobstore.schedule import MAX_DELAY_SECONDS
from outbox_bridge.jobstore.schema import jobs, outbox, schedule_actions, schedules
from tests.integration.test_api_jobs import counts
from tests.support.cli import rows
from tests.support.store import job_row

T0_TEXT = "2023-11-14T22:13:20.000Z"  # the FakeClock's start
BODY = {"kind": "noop", "payload": {"n": 1}}


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture
def post(client: TestClient, settings: Settings) -> Callable[..., Any]:
    token = issue_token(settings.auth_secret, tenant="acme", user="alice")

    def send(key: str = "k-1", **fields: Any) -> Any:
        headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}
        return client.post("/jobs", json={**BODY, **fields}, headers=headers)

    return send


def due_times(engine: Engine, job_id: str) -> tuple[float, list[float]]:
    """The job's available_at and its outbox rows' available_at."""
    with engine.connect() as conn:
        job = conn.execute(select(jobs.c.available_at).where(jobs.c.id == job_id)).scalar_one()
        rows = conn.execute(select(outbox.c.available_at).where(outbox.c.job_id == job_id)).scalars()
        return float(job), [float(at) for at in rows]


def test_a_job_delayed_by_seconds_is_queued_with_its_run_at_and_due_then(
    post: Callable[..., Any], engine: Engine, clock: FakeClock
) -> None:
    response = post(delay_seconds=90.5)
    assert response.status_code == 202
    view = response.json()
    assert (view["state"], view["created_at"]) == ("queued", T0_TEXT)
    assert view["run_at"] == "2023-11-14T22:14:50.500Z"
    assert due_times(engine, view["id"]) == (clock.now() + 90.5, [clock.now() + 90.5])


def test_a_job_given_a_run_at_is_due_at_that_instant_whatever_offset_names_it(
    post: Callable[..., Any], engine: Engine, clock: FakeClock
) -> None:
    view = post(run_at="2023-11-14T23:15:00+01:00").json()
    assert view["run_at"] == "2023-11-14T22:15:00.000Z"
    assert due_times(engine, view["id"]) == (clock.now() + 100, [clock.now() + 100])


def test_a_run_at_in_the_past_is_accepted_and_due_at_once(
    post: Callable[..., Any], engine: Engine, clock: FakeClock
) -> None:
    view = post(run_at="2023-11-14T22:00:00Z").json()
    assert (view["state"], view["run_at"]) == ("queued", "2023-11-14T22:00:00.000Z")
    assert due_times(engine, view["id"]) == (clock.now(), [clock.now()])


def test_a_job_without_a_start_has_no_run_at(post: Callable[..., Any]) -> None:
    assert post().json()["run_at"] is None


@pytest.mark.parametrize(
    "fields",
    [
        {"delay_seconds": 10, "run_at": "2023-11-14T22:14:00Z"},
        {"delay_seconds": -1},
        {"delay_seconds": MAX_DELAY_SECONDS + 1},
        {"delay_seconds": "10"},
        {"delay_seconds": True},
        {"run_at": "tomorrow"},
        {"run_at": "2023-11-14T22:14:00"},
        {"run_at": "2023-13-14T22:14:00Z"},
        {"run_at": 1_700_000_100},
        {"run_at": "2023-12-14T22:13:21Z"},
        {"run_at": "0001-01-01T00:00:00+23:59"},
        {"delay_seconds": 120, "deadline_seconds": 60},
    ],
    ids=[
        "both",
        "negative",
        "over-30-days",
        "a-string",
        "a-boolean",
        "not-a-time",
        "no-offset",
        "no-such-month",
        "a-number",
        "run-at-over-30-days",
        "run-at-before-year-one",
        "after-the-deadline",
    ],
)
def test_a_start_that_cannot_be_kept_is_400_and_writes_nothing(
    post: Callable[..., Any], engine: Engine, fields: dict[str, Any]
) -> None:
    response = post(**fields)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == "urn:outbox-bridge:problem:invalid-request"
    assert problem["errors"], "the problem says what was wrong, where"
    assert counts(engine) == (0, 0)


def test_both_a_delay_and_a_run_at_is_refused_saying_so(post: Callable[..., Any]) -> None:
    problem = post(delay_seconds=10, run_at="2023-11-14T22:14:00Z").json()
    assert problem["detail"] == "Give delay_seconds or run_at, not both."


def test_exactly_thirty_days_ahead_is_accepted(post: Callable[..., Any]) -> None:
    assert post("k-1", delay_seconds=MAX_DELAY_SECONDS).status_code == 202
    assert post("k-2", run_at="2023-12-14T22:13:20Z").status_code == 202


def test_a_retried_delay_is_the_original_job_due_when_the_first_was_accepted(
    post: Callable[..., Any], engine: Engine, clock: FakeClock
) -> None:
    original = post(delay_seconds=60).json()
    clock.advance(5)
    again = post(delay_seconds=60.0)
    assert again.status_code == 202
    assert again.json() == original
    assert counts(engine) == (1, 1)


@pytest.mark.parametrize(
    "first,second",
    [
        ({"delay_seconds": 60}, {"delay_seconds": 61}),
        ({"delay_seconds": 60}, {}),
        ({}, {"delay_seconds": 0}),
        ({"run_at": "2023-11-14T22:14:20Z"}, {"run_at": "2023-11-14T22:14:21Z"}),
        ({"delay_seconds": 60}, {"run_at": "2023-11-14T22:14:20Z"}),
    ],
    ids=["other-delay", "delay-dropped", "delay-added", "other-run-at", "delay-then-the-same-instant"],
)
def test_the_same_key_with_another_start_is_409(
    post: Callable[..., Any], engine: Engine, first: dict[str, Any], second: dict[str, Any]
) -> None:
    original = post(**first).json()
    response = post(**second)
    assert response.status_code == 409
    assert response.json()["job_url"] == f"/jobs/{original['id']}"
    assert counts(engine) == (1, 1)


def test_the_same_run_at_instant_in_another_offset_is_the_same_request(post: Callable[..., Any]) -> None:
    original = post(run_at="2023-11-14T22:14:20Z").json()
    again = post(run_at="2023-11-14T17:14:20.000-05:00")
    assert (again.status_code, again.json()["id"]) == (202, original["id"])


def test_a_delayed_job_cancelled_before_it_is_due_never_starts(
    post: Callable[..., Any], client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    view = post(delay_seconds=30).json()
    token = issue_token(settings.auth_secret, tenant="acme", user="alice")
    cancelled = client.post(f"/jobs/{view['id']}/cancel", headers={"Authorization": f"Bearer {token}"})
    assert (cancelled.status_code, cancelled.json()["state"]) == (200, "cancelled")
    assert cancelled.json()["run_at"] == view["run_at"]
    assert counts(engine) == (1, 0), "its delivery went with it"
    clock.advance(31)
    taken = db.transact(engine, claiming.claim_due, "w1", clock.now(), 30.0, 10)
    assert taken == []
    assert job_row(engine, view["id"]).state.value == "cancelled"


# --- what the app refuses of a schedule and of a payload, before anything is written ----------------------


def test_a_payload_nested_past_what_the_parser_follows_is_400_naming_the_limit(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    token = issue_token(settings.auth_secret, tenant="acme", user="alice")
    body = '{"kind": "noop", "payload": {"x": ' + "[" * 20_000 + "]" * 20_000 + "}}"
    headers = {
        "Authorization": f"Bearer {token}",
        "Idempotency-Key": "k-1",
        "Content-Type": "application/json",
    }

    response = client.post("/jobs", content=body, headers=headers)

    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == "urn:outbox-bridge:problem:invalid-payload"
    assert problem["detail"] == "The payload is nested more than 32 levels deep."
    assert counts(engine) == (0, 0)


def add_form(**fields: str) -> dict[str, str]:
    """The dashboard's add form as its page posts it: every field, the ones not named left empty."""
    blank = dict.fromkeys(("cron", "timezone", "every", "priority", "catch_up", "concurrency_key"), "")
    return (
        blank
        | {"tenant": "acme", "name": "nightly", "kind": "export", "payload": '{"rows": 10, "chunk": 5}'}
        | fields
    )


def operator(settings: Settings) -> dict[str, str]:
    token = issue_token(settings.auth_secret, tenant="ops", user="olga", operator=True)
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        pytest.param(
            {"cron": "0 0 30 2 *"}, "Cron: &#39;0 0 30 2 *&#39; has no slot in the next 10 years", id="feb-30"
        ),
        pytest.param({"cron": "0 0 31 4 *"}, "it would never fire", id="apr-31"),
        pytest.param(
            {"cron": "0 9 * * *", "timezone": "A" * 5000},
            "Time zone: a time zone is an IANA name of at most 64 characters",
            id="5000-character-zone",
        ),
        pytest.param({"cron": "R R * * *"}, "one job per slot needs fixed slots", id="random-field"),
        pytest.param(
            {"every": "1m", "payload": '{"rows": 10, "x": ' + "[" * 2_000 + "]" * 2_000 + "}"},
            "The payload is nested more than 32 levels deep",
            id="payload-past-the-parser",
        ),
    ],
)
def test_a_schedule_the_dashboard_cannot_keep_is_400_saying_why_and_writes_nothing(
    client: TestClient, settings: Settings, engine: Engine, fields: dict[str, str], says: str
) -> None:
    answer = client.post("/ui/schedules", headers=operator(settings), data=add_form(**fields))

    assert answer.status_code == 400, answer.text[:300]
    error = re.search(r'<p class="error-text" id="add-error"[^>]*>(.*?)</p>', answer.text, re.S)
    assert error is not None and error.group(1).startswith("Not added: ") and says in error.group(1)
    assert "\n" not in error.group(1).strip()
    assert rows(engine, schedules) == [] and rows(engine, schedule_actions) == []

"""A job's `concurrency_key` through every way a job is accepted (`POST /jobs`, `Client`, `AsyncClient`) and
every view of it (the job view, the list, the dashboard's job page): what is refused (and leaves nothing
behind), idempotency over the key, and `held_by` while a flow limit holds a queued job back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Connection, Engine, select, update

import outbox_bridge
from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.schema import jobs
from tests.integration.test_api_jobs import counts
from tests.support.store import claimed

BODY = {"kind": "noop", "payload": {"n": 1}}
KEY = "customer-42:invoices"


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings), follow_redirects=False) as test_client:
        yield test_client


@pytest.fixture
def token(settings: Settings) -> str:
    return issue_token(settings.auth_secret, tenant="acme", user="alice")


@pytest.fixture
def post(client: TestClient, token: str) -> Callable[..., Any]:
    def send(key: str = "k-1", **fields: Any) -> Any:
        headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}
        return client.post("/jobs", json={**BODY, **fields}, headers=headers)

    return send


def stored_key(engine: Engine, job_id: str) -> str | None:
    with engine.connect() as conn:
        return conn.execute(select(jobs.c.concurrency_key).where(jobs.c.id == job_id)).scalar_one()


def hold(engine: Engine, job_id: str, why: str) -> None:
    """Mark the job as a flow limit's claim marks one it holds back."""

    def held(conn: Connection) -> None:
        conn.execute(update(jobs).where(jobs.c.id == job_id).values(held_by=why))

    db.transact(engine, held)


def test_a_concurrency_key_is_stored_and_shown_in_every_view_of_the_job(
    post: Callable[..., Any], client: TestClient, token: str, engine: Engine
) -> None:
    keyed = post("k-1", concurrency_key=KEY)
    plain = post("k-2")
    assert (keyed.status_code, plain.status_code) == (202, 202), keyed.text
    view = keyed.json()
    assert (view["concurrency_key"], view["held_by"]) == (KEY, None)
    assert (plain.json()["concurrency_key"], plain.json()["held_by"]) == (None, None)
    headers = {"Authorization": f"Bearer {token}"}
    assert client.get(f"/jobs/{view['id']}", headers=headers).json() == view
    listed = {
        item["id"]: item["concurrency_key"] for item in client.get("/jobs", headers=headers).json()["items"]
    }
    assert listed == {view["id"]: KEY, plain.json()["id"]: None}
    assert (stored_key(engine, view["id"]), stored_key(engine, plain.json()["id"])) == (KEY, None)


@pytest.mark.parametrize(
    "concurrency_key",
    ["k" * 128, "é" * 128, "tenant 42 / invoices", "🧾"],
    ids=["128-characters", "128-non-ascii", "spaces", "emoji"],
)
def test_any_printable_key_of_1_to_128_characters_is_accepted_as_sent(
    post: Callable[..., Any], engine: Engine, concurrency_key: str
) -> None:
    response = post(concurrency_key=concurrency_key)
    assert response.status_code == 202, response.text
    assert response.json()["concurrency_key"] == concurrency_key
    assert stored_key(engine, response.json()["id"]) == concurrency_key


@pytest.mark.parametrize(
    "concurrency_key",
    ["", "k" * 129, "a\nb", "a\tb", "a\x00b", "\x7f", "a\u2028b", "a\u200bb", 42, ["k"], {"k": 1}],
    ids=[
        "empty",
        "129-characters",
        "newline",
        "tab",
        "nul",
        "delete",
        "line-separator",
        "zero-width-space",
        "a-number",
        "a-list",
        "an-object",
    ],
)
def test_a_bad_concurrency_key_is_400_naming_the_field_and_nothing_is_written(
    post: Callable[..., Any], engine: Engine, concurrency_key: Any
) -> None:
    response = post(concurrency_key=concurrency_key)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == "urn:outbox-bridge:problem:invalid-request"
    assert ["body", "concurrency_key"] in [issue["loc"] for issue in problem["errors"]]
    assert counts(engine) == (0, 0)


def test_a_null_concurrency_key_is_none(post: Callable[..., Any]) -> None:
    assert post(concurrency_key=None).json()["concurrency_key"] is None


def test_the_concurrency_key_is_part_of_the_request_under_its_idempotency_key(
    post: Callable[..., Any], engine: Engine
) -> None:
    original = post("k-1", concurrency_key=KEY)
    same = post("k-1", concurrency_key=KEY)
    other = post("k-1", concurrency_key="customer-43:invoices")
    dropped = post("k-1")
    plain = post("k-2")
    added = post("k-2", concurrency_key=KEY)
    unnamed = post("k-2", concurrency_key=None)

    assert (original.status_code, same.status_code, plain.status_code, unnamed.status_code) == (202,) * 4
    assert same.json()["id"] == original.json()["id"] and unnamed.json()["id"] == plain.json()["id"]
    assert (other.status_code, dropped.status_code, added.status_code) == (409, 409, 409)
    assert other.json()["type"] == "urn:outbox-bridge:problem:idempotency-conflict"
    assert other.json()["job_url"] == f"/jobs/{original.json()['id']}"
    assert counts(engine) == (2, 2)


@pytest.mark.parametrize("why", ["kind", "key", "rate"])
def test_a_queued_job_held_back_says_by_which_limit_and_a_running_one_never_does(
    post: Callable[..., Any], client: TestClient, token: str, engine: Engine, why: str
) -> None:
    job_id = post(concurrency_key=KEY).json()["id"]
    headers = {"Authorization": f"Bearer {token}"}
    hold(engine, job_id, why)
    assert client.get(f"/jobs/{job_id}", headers=headers).json()["held_by"] == why
    assert client.get("/jobs", headers=headers).json()["items"][0]["held_by"] == why
    claimed(engine, job_id, "test-worker")
    hold(engine, job_id, why)  # a mark left behind on a job no longer queued
    assert client.get(f"/jobs/{job_id}", headers=headers).json()["held_by"] is None


def test_the_dashboards_job_page_shows_the_key_and_what_holds_the_job_back(
    post: Callable[..., Any], client: TestClient, settings: Settings, engine: Engine
) -> None:
    keyed = post("k-1", concurrency_key="<b>42</b>").json()["id"]
    plain = post("k-2").json()["id"]
    hold(engine, keyed, "key")
    operator = issue_token(settings.auth_secret, tenant="ops", user="olga", operator=True)
    ops = {"Authorization": f"Bearer {operator}"}

    page = client.get(f"/ui/jobs/{keyed}", headers=ops)
    assert page.status_code == 200, page.text
    assert 'data-field="concurrency-key">&lt;b&gt;42&lt;/b&gt;</td>' in page.text
    assert "held back by its concurrency key's running cap" in page.text.replace("&#39;", "'")
    other = client.get(f"/ui/jobs/{plain}", headers=ops).text
    assert 'data-field="concurrency-key">none</td>' in other and 'data-field="held-by"' not in other


def _through(client: TestClient) -> httpx.MockTransport:
    """A transport that hands each request to the app (the client's own code, the app's own answers)."""

    def forward(request: httpx.Request) -> httpx.Response:
        answer = client.request(
            request.method, request.url.raw_path.decode(), content=request.content, headers=request.headers
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    return httpx.MockTransport(forward)


def test_the_client_sends_the_concurrency_key_and_reads_it_back(
    client: TestClient, token: str, engine: Engine
) -> None:
    with outbox_bridge.Client("http://api", token=token, transport=_through(client)) as api:
        job = api.submit("noop", {"n": 1}, key="k-1", concurrency_key=KEY)
        plain = api.submit("noop", {"n": 1}, key="k-2")
        with pytest.raises(outbox_bridge.Conflict) as conflict:
            api.submit("noop", {"n": 1}, key="k-1", concurrency_key="another")
        with pytest.raises(outbox_bridge.BadRequest):
            api.submit("noop", {"n": 1}, key="k-3", concurrency_key="")
        read = api.get(job.id)
    assert (job.concurrency_key, job.held_by, plain.concurrency_key) == (KEY, None, None)
    assert read == job and conflict.value.job_id == job.id
    assert stored_key(engine, job.id) == KEY


def test_the_async_client_sends_the_concurrency_key(client: TestClient, token: str, engine: Engine) -> None:
    async def submit() -> outbox_bridge.Job:
        async with outbox_bridge.AsyncClient("http://api", token=token, transport=_through(client)) as api:
            return await api.submit("noop", {"n": 1}, key="k-1", concurrency_key=KEY)

    job = asyncio.run(submit())
    assert job.concurrency_key == KEY and stored_key(engine, job.id) == KEY

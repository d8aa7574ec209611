"""The client's own rules, against a stand-in transport: a submit without a key makes one and keeps it on
its retries; 503 and connection errors are retried, other problems raise their status's class."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

import outbox_bridge
from outbox_bridge.client import http as client_module

VIEW = {
    "id": "j-1", "kind": "export", "state": "queued", "attempts": 0, "created_at": "2026-12-04T10:00:00.000Z",
    "updated_at": "2026-12-04T10:00:00.000Z", "deadline_at": None, "run_at": None, "priority": "normal",
    "cancel_requested": False, "progress": None, "result_url": None, "result_expires_at": None, "error": None,
}  # fmt: skip
PROBLEM = "application/problem+json"


@pytest.fixture(autouse=True)
def _no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "FIRST_PAUSE_SECONDS", 0.001)


class Flaky:
    """Answers each request with the next of `answers` (an int status, or an exception to raise)."""

    def __init__(self, *answers: int | Exception) -> None:
        self.answers = list(answers)
        self.keys: list[str | None] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.keys.append(request.headers.get("idempotency-key"))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        if answer == 202:
            return httpx.Response(202, json=VIEW)
        problem = {"type": "urn:outbox-bridge:problem:x", "title": "t", "status": answer, "detail": "said so"}
        return httpx.Response(answer, content=json.dumps(problem), headers={"content-type": PROBLEM})


def test_a_submit_retries_503_and_lost_connections_with_the_same_key_it_made() -> None:
    flaky = Flaky(503, httpx.ConnectError("refused"), 503, 202)
    with outbox_bridge.Client("http://api", token="t", transport=httpx.MockTransport(flaky)) as jobs:
        job = jobs.submit("export", {"rows": 1})
    assert job.id == "j-1" and job.state == "queued" and job.created_at.tzinfo is not None
    assert len(flaky.keys) == 4 and len(set(flaky.keys)) == 1 and flaky.keys[0]


def test_two_submits_without_a_key_are_two_keys() -> None:
    flaky = Flaky(202, 202)
    with outbox_bridge.Client("http://api", token="t", transport=httpx.MockTransport(flaky)) as jobs:
        jobs.submit("export", {})
        jobs.submit("export", {})
    assert flaky.keys[0] != flaky.keys[1]


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, outbox_bridge.BadRequest),
        (401, outbox_bridge.Unauthorized),
        (404, outbox_bridge.NotFound),
        (409, outbox_bridge.Conflict),
        (413, outbox_bridge.PayloadTooLarge),
    ],
)
def test_a_problem_raises_its_statuss_class_with_the_document(status: int, error: type) -> None:
    with outbox_bridge.Client("http://api", token="t", transport=httpx.MockTransport(Flaky(status))) as jobs:
        with pytest.raises(error) as raised:
            jobs.submit("export", {}, key="k")
    assert isinstance(raised.value, outbox_bridge.ClientError)
    assert raised.value.status == status and raised.value.detail == "said so"


def test_unavailable_past_the_retries_raises_unavailable() -> None:
    flaky = Flaky(503, 503, 503)
    transport = httpx.MockTransport(flaky)
    with outbox_bridge.Client("http://api", token="t", transport=transport, retries=2) as jobs:
        with pytest.raises(outbox_bridge.Unavailable):
            jobs.get("j-1")
    assert flaky.answers == []


def test_the_async_client_does_the_same() -> None:
    flaky = Flaky(503, 202)

    async def submit() -> outbox_bridge.Job:
        transport = httpx.MockTransport(flaky)
        async with outbox_bridge.AsyncClient("http://api", token="t", transport=transport) as jobs:
            return await jobs.submit("export", {})

    assert asyncio.run(submit()).id == "j-1"
    assert len(set(flaky.keys)) == 1

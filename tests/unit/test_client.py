"""The client's own rules, against a stand-in transport: a submit without a key makes one and keeps it on
its retries; 503 and connection errors are retried, other problems raise their status's class."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta, timezone

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


def test_a_connection_error_past_the_retries_raises_unavailable_as_a_503_does() -> None:
    flaky = Flaky(httpx.ConnectError("refused"), httpx.ConnectError("refused"), httpx.ConnectError("refused"))
    with outbox_bridge.Client(
        "http://api", token="t", transport=httpx.MockTransport(flaky), retries=2
    ) as jobs:
        with pytest.raises(outbox_bridge.Unavailable) as raised:
            jobs.get("j-1")
    assert flaky.answers == []
    assert raised.value.status == 503 and "no answer from http://api" in raised.value.detail
    assert isinstance(raised.value.__cause__, httpx.ConnectError)


CSV = {"content-type": "text/csv", "content-disposition": 'attachment; filename="j.csv"'}
BINARY = {"content-type": "application/octet-stream", "content-disposition": 'attachment; filename="j.bin"'}


@pytest.mark.parametrize(
    ("answer", "value"),
    [
        ({"json": {"rows": 3, "path": "x.csv"}}, {"rows": 3, "path": "x.csv"}),
        ({"content": b"null", "headers": {"content-type": "application/json"}}, None),
        ({"content": b"id,sku\n1,a\n", "headers": CSV}, b"id,sku\n1,a\n"),
        ({"content": b"\x00\x01", "headers": BINARY}, b"\x00\x01"),
    ],
)
def test_result_is_a_json_results_decoded_value_and_a_file_results_bytes(
    answer: dict[str, object], value: object
) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, **answer))  # type: ignore[arg-type]
    with outbox_bridge.Client("http://api", token="t", transport=transport) as jobs:
        assert jobs.result("j-1") == value

    async def read() -> object:
        async_transport = httpx.MockTransport(lambda request: httpx.Response(200, **answer))  # type: ignore[arg-type]
        async with outbox_bridge.AsyncClient("http://api", token="t", transport=async_transport) as jobs:
            return await jobs.result("j-1")

    assert asyncio.run(read()) == value


class Tokens:
    """Answers 401 to any token but the `good` ones, else the job view; counts the callable's calls."""

    def __init__(self, *made: str, good: tuple[str, ...]) -> None:
        self.made, self.good, self.calls = list(made), good, 0
        self.sent: list[str] = []

    def __call__(self) -> str:
        self.calls += 1
        return self.made.pop(0)

    def answer(self, request: httpx.Request) -> httpx.Response:
        token = request.headers["authorization"].removeprefix("Bearer ")
        self.sent.append(token)
        if token in self.good:
            return httpx.Response(200, json=VIEW)
        return httpx.Response(401, json={"title": "Unauthorized", "status": 401, "detail": "expired"})


def test_a_token_callable_is_asked_for_the_first_request_and_again_only_after_a_401() -> None:
    tokens = Tokens("first", "second", good=("first",))
    with outbox_bridge.Client(
        "http://api", token=tokens, transport=httpx.MockTransport(tokens.answer)
    ) as jobs:
        jobs.get("j-1")
        jobs.get("j-1")
        assert tokens.calls == 1  # the token it made is kept while the api takes it
        tokens.good = ("second",)  # the first one expires
        assert jobs.get("j-1").id == "j-1"
        assert tokens.calls == 2 and tokens.sent == ["first", "first", "first", "second"]
        jobs.get("j-1")
        assert tokens.calls == 2


def test_a_fresh_token_the_api_refuses_too_raises_unauthorized_after_one_renewal() -> None:
    tokens = Tokens("first", "second", "third", good=())
    with outbox_bridge.Client(
        "http://api", token=tokens, transport=httpx.MockTransport(tokens.answer)
    ) as jobs:
        with pytest.raises(outbox_bridge.Unauthorized):
            jobs.get("j-1")
    assert tokens.sent == ["first", "second"]


def test_a_fixed_token_the_api_refuses_raises_unauthorized_at_once() -> None:
    tokens = Tokens(good=())
    with outbox_bridge.Client("http://api", token="t", transport=httpx.MockTransport(tokens.answer)) as jobs:
        with pytest.raises(outbox_bridge.Unauthorized):
            jobs.get("j-1")
    assert tokens.sent == ["t"]


def test_the_async_client_renews_with_a_coroutine_and_says_unavailable_for_a_lost_connection() -> None:
    tokens = Tokens("first", "second", good=("second",))

    async def fresh() -> str:
        return tokens()

    async def get() -> outbox_bridge.Job:
        transport = httpx.MockTransport(tokens.answer)
        async with outbox_bridge.AsyncClient("http://api", token=fresh, transport=transport) as jobs:
            return await jobs.get("j-1")

    assert asyncio.run(get()).id == "j-1" and tokens.sent == ["first", "second"]

    async def lost() -> None:
        transport = httpx.MockTransport(Flaky(httpx.ConnectError("refused"), httpx.ReadTimeout("slow")))
        async with outbox_bridge.AsyncClient("http://api", token="t", transport=transport, retries=1) as jobs:
            await jobs.get("j-1")

    with pytest.raises(outbox_bridge.Unavailable) as raised:
        asyncio.run(lost())
    assert isinstance(raised.value.__cause__, httpx.ReadTimeout)


def sent_bodies(run_at: object) -> list[dict[str, object]]:
    bodies: list[dict[str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(202, json=VIEW)

    with outbox_bridge.Client("http://api", token="t", transport=httpx.MockTransport(answer)) as jobs:
        jobs.submit("export", {}, run_at=run_at)  # type: ignore[arg-type]
    return bodies


def test_submit_takes_run_at_as_an_aware_datetime_or_an_rfc3339_string() -> None:
    berlin = timezone(timedelta(hours=1))
    assert sent_bodies(datetime(2027, 1, 2, 3, 4, 5, tzinfo=UTC))[0]["run_at"] == "2027-01-02T03:04:05+00:00"
    assert sent_bodies(datetime(2027, 1, 2, 3, 4, tzinfo=berlin))[0]["run_at"] == "2027-01-02T03:04:00+01:00"
    assert sent_bodies("2027-01-02T03:04:05Z")[0]["run_at"] == "2027-01-02T03:04:05Z"


def test_submit_refuses_a_naive_run_at_before_sending_anything() -> None:
    with pytest.raises(ValueError, match="aware datetime"):
        sent_bodies(datetime(2027, 1, 2, 3, 4, 5))

"""What both clients send and how they read the answer: a request as data (`Call`), the bearer token
(fixed, or made afresh by a callable), the `ClientError` of an answer that is not a success, and a result
as its value (decoded JSON, or a file's bytes)."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from outbox_bridge.client.errors import (
    BadRequest,
    ClientError,
    Conflict,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    Unavailable,
)

ERRORS: dict[int, type[ClientError]] = {
    400: BadRequest,
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    503: Unavailable,
}
JSON = "application/json"

# A bearer token as the clients take it: the token itself, or a callable that returns a fresh one (for
# `AsyncClient`, a coroutine function too).
TokenSource = str | Callable[[], str]
AsyncTokenSource = str | Callable[[], str] | Callable[[], Awaitable[str]]


@dataclass(frozen=True)
class Call:
    """One request, as both clients send it."""

    method: str
    path: str
    json: dict[str, Any] | None = None
    params: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


def submission(
    kind: str,
    payload: dict[str, Any],
    key: str | None,
    deadline_seconds: int | None,
    delay_seconds: float | None,
    run_at: datetime | str | None,
    priority: str | None,
    concurrency_key: str | None,
    after: Sequence[str] | None = None,
    on_dependency_failure: str | None = None,
) -> Call:
    """The `POST /jobs` of a submit; without `key` one made for this call (kept on its retries)."""
    body = job_body(
        {
            "kind": kind, "payload": payload, "deadline_seconds": deadline_seconds,
            "delay_seconds": delay_seconds, "run_at": run_at, "priority": priority,
            "concurrency_key": concurrency_key, "after": after,
            "on_dependency_failure": on_dependency_failure,
        }
    )  # fmt: skip
    return Call("POST", "/jobs", json=body, headers={"Idempotency-Key": key or made_key()})


def batch_submission(
    jobs: Iterable[Mapping[str, Any]], callback: Mapping[str, Any] | None, key: str | None
) -> Call:
    """The `POST /batches` of a submit_batch: each job (and the callback) a `POST /jobs` body, with no key
    of its own (`ValueError`: the batch's key names them all); without `key` one made for this call (kept on
    its retries)."""
    body: dict[str, Any] = {"jobs": [_batch_job(job, f"jobs[{i}]") for i, job in enumerate(jobs)]}
    if callback is not None:
        body["callback"] = _batch_job(callback, "callback")
    return Call("POST", "/batches", json=body, headers={"Idempotency-Key": key or made_key()})


def job_body(job: Mapping[str, Any], name: str = "job") -> dict[str, Any]:
    """`job` as a `POST /jobs` body: its fields that are not None, `run_at` in RFC 3339 and `after` a list.
    `TypeError` for a job that is not a mapping."""
    if not isinstance(job, Mapping):
        raise TypeError(f"{name} is a dict of a POST /jobs body ({{'kind': ..., 'payload': ...}}): {job!r}")
    body = {field: value for field, value in job.items() if value is not None}
    if "run_at" in body:
        body["run_at"] = rfc3339(body["run_at"])
    if "after" in body:
        if isinstance(body["after"], str):
            raise TypeError(f"{name}: after is a list of job ids, not the text {body['after']!r}")
        body["after"] = list(body["after"])
    return body


def _batch_job(job: Mapping[str, Any], name: str) -> dict[str, Any]:
    body = job_body(job, name)
    if "key" in body:
        raise ValueError(f"{name}: a job of a batch takes no key of its own: the batch's key names it")
    return body


def made_key() -> str:
    return f"client-{uuid.uuid4()}"


def rfc3339(run_at: datetime | str) -> str:
    """`run_at` as the api reads it: an aware `datetime` in RFC 3339, a string as given (the api checks
    it). `ValueError` for a naive `datetime`, whose instant no one can know."""
    if isinstance(run_at, str):
        return run_at
    if run_at.tzinfo is None or run_at.utcoffset() is None:
        raise ValueError("run_at must be an aware datetime (with a tzinfo, e.g. datetime.now(UTC))")
    return run_at.isoformat()


class Bearer:
    """The token of a client's requests: a fixed one, or the last one its callable made. The callable is
    called for the first request and again after the api refused the token (401), never more often."""

    def __init__(self, source: AsyncTokenSource) -> None:
        self.source = source
        self.current: str | None = source if isinstance(source, str) else None

    @property
    def renewable(self) -> bool:
        return not isinstance(self.source, str)

    def forget(self) -> None:
        """After a 401: the next request asks the callable for a fresh token."""
        if self.renewable:
            self.current = None

    def header(self) -> dict[str, str]:
        if self.current is None:
            made = self.source()  # type: ignore[operator]
            self.current = _checked(made)
        return {"Authorization": f"Bearer {self.current}"}

    async def header_async(self) -> dict[str, str]:
        if self.current is None:
            made = self.source()  # type: ignore[operator]
            self.current = _checked(await made if inspect.isawaitable(made) else made)
        return {"Authorization": f"Bearer {self.current}"}


def _checked(token: object) -> str:
    if not isinstance(token, str) or not token:
        raise TypeError(f"the client's token callable must return a non-empty str, not {token!r}")
    return token


def raise_for(response: httpx.Response) -> None:
    """The `ClientError` of an answer that is not a success (its problem document, or what stands in)."""
    if response.is_success:
        return
    try:
        problem = response.json()
    except ValueError:
        problem = {}
    if not isinstance(problem, dict):
        problem = {}
    problem.setdefault("status", response.status_code)
    problem.setdefault("detail", response.text[:500])
    error = ERRORS.get(response.status_code, ClientError)
    if error is Conflict:
        job_id = str(problem.get("job_url", "")).rpartition("/jobs/")[2] or None
        raise Conflict(problem, response.status_code, job_id=job_id)
    raise error(problem, response.status_code)


def unavailable(base_url: httpx.URL, exc: httpx.TransportError) -> Unavailable:
    """What a request that never got an answer raises once the retries are spent: `Unavailable`, as a
    `503` would, its problem document saying what went wrong (the httpx error is its `__cause__`)."""
    said = str(exc) or type(exc).__name__
    problem = {
        "title": "Service Unavailable",
        "status": 503,
        "detail": f"no answer from {base_url}: {type(exc).__name__}: {said}",
    }
    return Unavailable(problem, 503)


def result_value(response: httpx.Response) -> Any:
    """A committed result as its kind made it: the decoded JSON value of a JSON result, the bytes of a
    file result (served as an attachment of its own media type)."""
    media_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type == JSON and "attachment" not in response.headers.get("content-disposition", ""):
        return response.json()
    return response.content

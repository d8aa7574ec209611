"""`Client` and `AsyncClient`: the api over HTTP, with its idempotency and its problems made Python.

    with outbox_bridge.Client("http://127.0.0.1:8000", token=token) as jobs:
        job = jobs.submit("export", {"rows": 1000, "chunk": 100})
        done = jobs.wait(job.id, timeout=60)
        csv = jobs.result(job.id)

`submit` without a `key` makes one and reuses it on its own retries of that call, so a retry after a lost
answer is the same job, never a second one. Connection errors and `503` are retried with a backoff; every
other answer that is not a success raises the `ClientError` subclass of its status, carrying the problem
document the api sent.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
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
from outbox_bridge.client.job import Job

ERRORS: dict[int, type[ClientError]] = {
    400: BadRequest,
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    503: Unavailable,
}
RETRIED_STATUSES = {503}
FIRST_PAUSE_SECONDS = 0.1
MAX_PAUSE_SECONDS = 2.0


@dataclass(frozen=True)
class _Call:
    """One request, as both clients send it."""

    method: str
    path: str
    json: dict[str, Any] | None = None
    params: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


def _submission(
    kind: str,
    payload: dict[str, Any],
    key: str | None,
    deadline_seconds: int | None,
    delay_seconds: float | None,
    run_at: str | None,
    priority: str | None,
    concurrency_key: str | None,
) -> _Call:
    body: dict[str, Any] = {"kind": kind, "payload": payload}
    for name, value in (
        ("deadline_seconds", deadline_seconds),
        ("delay_seconds", delay_seconds),
        ("run_at", run_at),
        ("priority", priority),
        ("concurrency_key", concurrency_key),
    ):
        if value is not None:
            body[name] = value
    return _Call("POST", "/jobs", json=body, headers={"Idempotency-Key": key or f"client-{uuid.uuid4()}"})


def _raise_for(response: httpx.Response) -> None:
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


def _retryable(response: httpx.Response) -> bool:
    return response.status_code in RETRIED_STATUSES


def _pause(attempt: int, response: httpx.Response | None) -> float:
    """The wait before retry `attempt` (1, 2, ...): the answer's Retry-After when it gives seconds, else a
    backoff doubling from FIRST_PAUSE_SECONDS up to MAX_PAUSE_SECONDS."""
    if response is not None:
        try:
            return min(float(response.headers.get("retry-after", "")), MAX_PAUSE_SECONDS * 5)
        except ValueError:
            pass
    return min(FIRST_PAUSE_SECONDS * 2 ** (attempt - 1), MAX_PAUSE_SECONDS)


class Client:
    """The api at `base_url` for the bearer `token`. A context manager (it keeps its connections)."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str,
        timeout: float = 10.0,
        retries: int = 5,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )
        self.retries = retries

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def submit(
        self,
        kind: str,
        payload: dict[str, Any],
        *,
        key: str | None = None,
        deadline_seconds: int | None = None,
        delay_seconds: float | None = None,
        run_at: str | None = None,
        priority: str | None = None,
        concurrency_key: str | None = None,
    ) -> Job:
        """Submit a job (`POST /jobs`) and return it as accepted. Without `key` one is made for this call."""
        call = _submission(
            kind, payload, key, deadline_seconds, delay_seconds, run_at, priority, concurrency_key
        )
        return Job.from_view(self._send(call).json())

    def get(self, job_id: str) -> Job:
        return Job.from_view(self._send(_Call("GET", f"/jobs/{job_id}")).json())

    def list(self, state: str | None = None) -> Iterator[Job]:
        """Every job of the tenant (in `state`), newest first, following the pages' cursors."""
        params = {"limit": "100", **({"state": state} if state else {})}
        while True:
            page = self._send(_Call("GET", "/jobs", params=params)).json()
            yield from (Job.from_view(item) for item in page["items"])
            if not page.get("next_cursor"):
                return
            params = {**params, "cursor": page["next_cursor"]}

    def cancel(self, job_id: str) -> Job:
        """Cancel the job: at once while queued, at its next safe point while running; a finished job is
        returned unchanged."""
        return Job.from_view(self._send(_Call("POST", f"/jobs/{job_id}/cancel")).json())

    def wait(self, job_id: str, *, timeout: float) -> Job:
        """The job once it is finished (succeeded, failed, dead, cancelled or unknown); `TimeoutError` if it
        is not within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        pause = 0.02
        while True:
            job = self.get(job_id)
            if job.finished:
                return job
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"job {job_id} is still {job.state} after {timeout} s")
            time.sleep(min(pause, left))
            pause = min(pause * 2, 1.0)

    def result(self, job_id: str) -> bytes:
        """The committed result's bytes (JSON, or the file the job made); `NotFound` until it succeeded."""
        return self._send(_Call("GET", f"/jobs/{job_id}/result")).content

    def _send(self, call: _Call) -> httpx.Response:
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._http.request(
                    call.method, call.path, json=call.json, params=call.params, headers=call.headers
                )
            except httpx.TransportError:
                if attempt > self.retries:
                    raise
                time.sleep(_pause(attempt, None))
                continue
            if _retryable(response) and attempt <= self.retries:
                time.sleep(_pause(attempt, response))
                continue
            _raise_for(response)
            return response


class AsyncClient:
    """`Client` with the same methods as coroutines (`list` an async iterator)."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str,
        timeout: float = 10.0,
        retries: int = 5,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )
        self.retries = retries

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def submit(
        self,
        kind: str,
        payload: dict[str, Any],
        *,
        key: str | None = None,
        deadline_seconds: int | None = None,
        delay_seconds: float | None = None,
        run_at: str | None = None,
        priority: str | None = None,
        concurrency_key: str | None = None,
    ) -> Job:
        call = _submission(
            kind, payload, key, deadline_seconds, delay_seconds, run_at, priority, concurrency_key
        )
        return Job.from_view((await self._send(call)).json())

    async def get(self, job_id: str) -> Job:
        return Job.from_view((await self._send(_Call("GET", f"/jobs/{job_id}"))).json())

    async def list(self, state: str | None = None) -> AsyncIterator[Job]:
        params = {"limit": "100", **({"state": state} if state else {})}
        while True:
            page = (await self._send(_Call("GET", "/jobs", params=params))).json()
            for item in page["items"]:
                yield Job.from_view(item)
            if not page.get("next_cursor"):
                return
            params = {**params, "cursor": page["next_cursor"]}

    async def cancel(self, job_id: str) -> Job:
        return Job.from_view((await self._send(_Call("POST", f"/jobs/{job_id}/cancel"))).json())

    async def wait(self, job_id: str, *, timeout: float) -> Job:
        deadline = time.monotonic() + timeout
        pause = 0.02
        while True:
            job = await self.get(job_id)
            if job.finished:
                return job
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"job {job_id} is still {job.state} after {timeout} s")
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, 1.0)

    async def result(self, job_id: str) -> bytes:
        return (await self._send(_Call("GET", f"/jobs/{job_id}/result"))).content

    async def _send(self, call: _Call) -> httpx.Response:
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self._http.request(
                    call.method, call.path, json=call.json, params=call.params, headers=call.headers
                )
            except httpx.TransportError:
                if attempt > self.retries:
                    raise
                await asyncio.sleep(_pause(attempt, None))
                continue
            if _retryable(response) and attempt <= self.retries:
                await asyncio.sleep(_pause(attempt, response))
                continue
            _raise_for(response)
            return response

"""`Client` and `AsyncClient`: the api over HTTP, with its idempotency and its problems made Python.

    with outbox_bridge.Client("http://127.0.0.1:8000", token=token) as jobs:
        job = jobs.submit("export", {"rows": 1000, "chunk": 100})
        done = jobs.wait(job.id, timeout=60)
        csv = jobs.result(job.id)

`submit` (and `submit_batch`) without a `key` makes one and reuses it on its own retries of that call, so a
retry after a lost answer is the same job (the same batch), never a second one. Connection errors and `503`
are retried with a backoff, and a connection error that outlasts the retries raises `Unavailable` as a
`503` does; every other answer that is not a success raises the `ClientError` subclass of its status,
carrying the problem document the api sent. `token` is the bearer token, or a callable that returns one: it
is called for the first request and again whenever the api answers `401` (an expired token), and that
request is then sent once more with the new one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import httpx

from outbox_bridge.client.batch import Batch
from outbox_bridge.client.calls import (
    AsyncTokenSource,
    Bearer,
    Call,
    TokenSource,
    batch_submission,
    raise_for,
    result_value,
    submission,
    unavailable,
)
from outbox_bridge.client.job import Job

RETRIED_STATUSES = {503}
FIRST_PAUSE_SECONDS = 0.1
MAX_PAUSE_SECONDS = 2.0


def _retryable(response: httpx.Response) -> bool:
    return response.status_code in RETRIED_STATUSES


def _token_refused(response: httpx.Response, bearer: Bearer, renewed: bool) -> bool:
    """Whether to send the request again with a fresh token: the api refused this one (401), the token
    comes from a callable, and this call has not renewed it yet."""
    return response.status_code == 401 and bearer.renewable and not renewed


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
    """The api at `base_url` for the bearer `token` (a token, or a callable that returns a fresh one: see
    the module's docstring). A context manager (it keeps its connections)."""

    def __init__(
        self,
        base_url: str,
        *,
        token: TokenSource,
        timeout: float = 10.0,
        retries: int = 5,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(base_url=base_url, timeout=timeout, transport=transport)
        self._bearer = Bearer(token)
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
        run_at: datetime | str | None = None,
        priority: str | None = None,
        concurrency_key: str | None = None,
        after: Sequence[str] | None = None,
        on_dependency_failure: str | None = None,
    ) -> Job:
        """Submit a job (`POST /jobs`) and return it as accepted. Without `key` one is made for this call.
        `run_at` is an aware `datetime` or an RFC 3339 string. With `after` (ids of earlier jobs of the
        tenant) it waits `queued` until they have all succeeded; when one of them ends otherwise it ends
        `cancelled`, unless `on_dependency_failure` is `"run"`."""
        call = submission(
            kind, payload, key, deadline_seconds, delay_seconds, run_at, priority, concurrency_key, after,
            on_dependency_failure,
        )  # fmt: skip
        return Job.from_view(self._send(call).json())

    def submit_batch(
        self,
        jobs: Iterable[Mapping[str, Any]],
        *,
        callback: Mapping[str, Any] | None = None,
        key: str | None = None,
    ) -> Batch:
        """Submit a batch (`POST /batches`): `jobs` (1 to 1,000) and the `callback` that runs once every
        one of them has ended, each a dict of a `POST /jobs` body (`{"kind": ..., "payload": ...}`, and
        any of `submit`'s options but `key`). Returns the batch as accepted; without `key` one is made for
        this call."""
        return Batch.from_view(self._send(batch_submission(jobs, callback, key)).json())

    def get_batch(self, batch_id: str) -> Batch:
        return Batch.from_view(self._send(Call("GET", f"/batches/{batch_id}")).json())

    def get(self, job_id: str) -> Job:
        return Job.from_view(self._send(Call("GET", f"/jobs/{job_id}")).json())

    def list(self, state: str | None = None) -> Iterator[Job]:
        """Every job of the tenant (in `state`), newest first, following the pages' cursors."""
        params = {"limit": "100", **({"state": state} if state else {})}
        while True:
            page = self._send(Call("GET", "/jobs", params=params)).json()
            yield from (Job.from_view(item) for item in page["items"])
            if not page.get("next_cursor"):
                return
            params = {**params, "cursor": page["next_cursor"]}

    def cancel(self, job_id: str) -> Job:
        """Cancel the job: at once while queued, at its next safe point while running; a finished job is
        returned unchanged."""
        return Job.from_view(self._send(Call("POST", f"/jobs/{job_id}/cancel")).json())

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

    def result(self, job_id: str) -> Any:
        """The committed result: the JSON value the kind returned, decoded (a `dict`, or `None` for a kind
        that returned nothing), or the bytes of the file it made; `NotFound` until it succeeded."""
        return result_value(self._send(Call("GET", f"/jobs/{job_id}/result")))

    def _send(self, call: Call) -> httpx.Response:
        attempt, renewed = 0, False
        while True:
            attempt += 1
            headers = {**call.headers, **self._bearer.header()}
            try:
                response = self._http.request(
                    call.method, call.path, json=call.json, params=call.params, headers=headers
                )
            except httpx.TransportError as exc:
                if attempt > self.retries:
                    raise unavailable(self._http.base_url, exc) from exc
                time.sleep(_pause(attempt, None))
                continue
            if _token_refused(response, self._bearer, renewed):
                attempt, renewed = attempt - 1, True
                self._bearer.forget()
                continue
            if _retryable(response) and attempt <= self.retries:
                time.sleep(_pause(attempt, response))
                continue
            raise_for(response)
            return response


class AsyncClient:
    """`Client` with the same methods as coroutines (`list` an async iterator)."""

    def __init__(
        self,
        base_url: str,
        *,
        token: AsyncTokenSource,
        timeout: float = 10.0,
        retries: int = 5,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(base_url=base_url, timeout=timeout, transport=transport)
        self._bearer = Bearer(token)
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
        run_at: datetime | str | None = None,
        priority: str | None = None,
        concurrency_key: str | None = None,
        after: Sequence[str] | None = None,
        on_dependency_failure: str | None = None,
    ) -> Job:
        call = submission(
            kind, payload, key, deadline_seconds, delay_seconds, run_at, priority, concurrency_key, after,
            on_dependency_failure,
        )  # fmt: skip
        return Job.from_view((await self._send(call)).json())

    async def submit_batch(
        self,
        jobs: Iterable[Mapping[str, Any]],
        *,
        callback: Mapping[str, Any] | None = None,
        key: str | None = None,
    ) -> Batch:
        return Batch.from_view((await self._send(batch_submission(jobs, callback, key))).json())

    async def get_batch(self, batch_id: str) -> Batch:
        return Batch.from_view((await self._send(Call("GET", f"/batches/{batch_id}"))).json())

    async def get(self, job_id: str) -> Job:
        return Job.from_view((await self._send(Call("GET", f"/jobs/{job_id}"))).json())

    async def list(self, state: str | None = None) -> AsyncIterator[Job]:
        params = {"limit": "100", **({"state": state} if state else {})}
        while True:
            page = (await self._send(Call("GET", "/jobs", params=params))).json()
            for item in page["items"]:
                yield Job.from_view(item)
            if not page.get("next_cursor"):
                return
            params = {**params, "cursor": page["next_cursor"]}

    async def cancel(self, job_id: str) -> Job:
        return Job.from_view((await self._send(Call("POST", f"/jobs/{job_id}/cancel"))).json())

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

    async def result(self, job_id: str) -> Any:
        return result_value(await self._send(Call("GET", f"/jobs/{job_id}/result")))

    async def _send(self, call: Call) -> httpx.Response:
        attempt, renewed = 0, False
        while True:
            attempt += 1
            headers = {**call.headers, **(await self._bearer.header_async())}
            try:
                response = await self._http.request(
                    call.method, call.path, json=call.json, params=call.params, headers=headers
                )
            except httpx.TransportError as exc:
                if attempt > self.retries:
                    raise unavailable(self._http.base_url, exc) from exc
                await asyncio.sleep(_pause(attempt, None))
                continue
            if _token_refused(response, self._bearer, renewed):
                attempt, renewed = attempt - 1, True
                self._bearer.forget()
                continue
            if _retryable(response) and attempt <= self.retries:
                await asyncio.sleep(_pause(attempt, response))
                continue
            raise_for(response)
            return response

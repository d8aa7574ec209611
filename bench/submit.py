"""Submitting `noop` jobs: straight into the store (as the API would, job row and outbox row in one
transaction) or through the HTTP API; as a burst, or open loop on a fixed schedule."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy import Engine

from outbox_bridge.api.auth import issue_token
from outbox_bridge.client.errors import ClientError
from outbox_bridge.client.http import Client
from outbox_bridge.core import clock
from outbox_bridge.jobstore import intake

KIND = "noop"
OWNER = "bench"


def _key() -> str:
    return uuid.uuid4().hex


@dataclass
class Tally:
    """What the submitters got back: statuses by name, and one example of each failure."""

    statuses: Counter[str] = field(default_factory=Counter)
    errors: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, status: str, error: str | None = None) -> None:
        with self._lock:
            self.statuses[status] += 1
            if error is not None:
                self.errors.setdefault(status, error[:300])

    @property
    def accepted(self) -> int:
        with self._lock:
            return self.statuses["accepted"]

    def as_dict(self) -> dict[str, object]:
        with self._lock:
            return {"statuses": dict(self.statuses), "errors": dict(self.errors)}


def _prepared(tenant: str, count: int, max_attempts: int) -> list[intake.Prepared]:
    """`count` accepts, built before their transaction as the API's group commit builds them."""
    request: dict[str, Any] = {"tenant": tenant, "owner": OWNER, "kind": KIND, "max_attempts": max_attempts}
    return [
        intake.prepare(**request, payload={}, operation_key=_key(), now=clock.now()) for _ in range(count)
    ]


@dataclass
class StoreSubmitter:
    """Accepts jobs in this process as the api commits them (`intake.accept_committed`), `batch` accepts per
    transaction."""

    engine: Engine
    max_attempts: int

    def submit(self, tenant: str, count: int, tally: Tally) -> None:
        try:
            prepared = _prepared(tenant, count, self.max_attempts)
            intake.accept_committed(self.engine, lambda: prepared)
        except Exception as exc:  # a failed accept is a figure, not a crash of the benchmark
            tally.add(type(exc).__name__, str(exc))
            return
        for _ in range(count):
            tally.add("accepted")

    def burst(self, tenant: str, jobs: int, batch: int, tally: Tally, stop: threading.Event) -> None:
        """Submit `jobs` as fast as one thread can, `batch` per transaction."""
        left = jobs
        while left > 0 and not stop.is_set():
            self.submit(tenant, min(batch, left), tally)
            left -= batch


@dataclass
class HttpSubmitter:
    """POST /jobs through `outbox_bridge.Client`, one per thread and tenant (a client holds one token), an
    Idempotency-Key per request, and no retries: every answer is a figure, a 503 included."""

    base_url: str
    secret: str
    timeout: float = 10.0
    _local: threading.local = field(default_factory=threading.local, repr=False)
    _clients: list[Client] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _client(self, tenant: str) -> Client:
        clients: dict[str, Client] = self._local.__dict__.setdefault("clients", {})
        if tenant not in clients:
            token = issue_token(self.secret, tenant=tenant, user=OWNER)
            clients[tenant] = Client(self.base_url, token=token, timeout=self.timeout, retries=0)
            with self._lock:
                self._clients.append(clients[tenant])
        return clients[tenant]

    def close(self) -> None:
        with self._lock:
            for client in self._clients:
                client.close()
            self._clients.clear()

    def submit(self, tenant: str, tally: Tally) -> None:
        try:
            self._client(tenant).submit(KIND, {}, key=_key())
        except ClientError as refused:
            # A request that never got an answer raises Unavailable too: tally it by what went wrong.
            cause = refused.__cause__
            name = type(cause).__name__ if isinstance(cause, httpx.HTTPError) else f"http_{refused.status}"
            tally.add(name, str(refused))
            return
        except httpx.HTTPError as exc:
            tally.add(type(exc).__name__, str(exc))
            return
        tally.add("accepted")

    def burst(self, tenant: str, jobs: int, threads: int, tally: Tally, stop: threading.Event) -> None:
        """Submit `jobs` from `threads` concurrent clients, each waiting for its answer before the next."""
        numbers = itertools.count()
        lock = threading.Lock()

        def work() -> None:
            while not stop.is_set():
                with lock:
                    if next(numbers) >= jobs:
                        return
                self.submit(tenant, tally)

        with ThreadPoolExecutor(threads, thread_name_prefix="http-burst") as pool:
            for future in [pool.submit(work) for _ in range(threads)]:
                future.result()


@dataclass
class Schedule:
    """When each submission of an open-loop phase was due and how late it was sent."""

    due: int = 0
    max_lag_seconds: float = 0.0


def _unless(stop: threading.Event, send: Callable[[], None]) -> None:
    if not stop.is_set():
        send()


def open_loop(
    send: Callable[[], None],
    rate: float,
    seconds: float,
    stop: threading.Event,
    *,
    workers: int = 4,
    at: list[tuple[float, Callable[[], None]]] | None = None,
) -> Schedule:
    """Call `send` `rate` times a second for `seconds`, on a fixed schedule that never waits for
    completions (open loop): sends are handed to `workers` threads so a slow one does not delay the
    next. `at` holds (offset seconds, action) pairs run on the schedule thread, e.g. a broker outage."""
    schedule = Schedule()
    pending = sorted(at or [], key=lambda item: item[0])
    total = int(rate * seconds)
    with ThreadPoolExecutor(workers, thread_name_prefix="open-loop") as pool:
        start = time.monotonic()
        for i in range(total):
            due = start + i / rate
            while pending and pending[0][0] <= due - start:
                pending.pop(0)[1]()
            if stop.wait(max(0.0, due - time.monotonic())):
                break
            schedule.max_lag_seconds = max(schedule.max_lag_seconds, time.monotonic() - due)
            pool.submit(_unless, stop, send)
            schedule.due += 1
        for _, action in pending:  # actions scheduled at the very end still run
            action()
    return schedule

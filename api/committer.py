"""Group commit for accepted jobs.

SQLite has one writer at a time and, with `synchronous=FULL`, every commit waits for an fsync of the WAL: one
transaction per request caps a process at a few hundred jobs a second. So the API's writes go through one
writer thread that commits, in a single transaction, every job that arrived while the previous transaction
was committing, and every job that arrived while it waited in the writer queue (the batch is topped up
once the transaction has begun). Each job still gets its job row and its outbox row in the same
transaction, and each request is answered only after the transaction holding its job has committed.

Under load the clients whose jobs one transaction committed send their next requests together, as their
answers reach them, and the writer would start its next transaction with the first of them. So while
requests come in together (the last batch held more than one), the writer waits `GATHER_SECONDS` after the
first before it takes the batch, as PostgreSQL's `commit_delay` does: fewer, fuller transactions. A lone
request (the last batch held one) is committed at once.

A batch that fails writes nothing. When the store is unavailable, every request in it gets that error;
otherwise (one request the database refuses fails the whole transaction) each request is committed again
in a transaction of its own, so only the request at fault fails, with its own error.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DataError

from outbox_bridge.jobstore import db, intake
from outbox_bridge.jobstore.errors import IdempotencyConflict, Unstorable

log = logging.getLogger(__name__)

MAX_BATCH = 256
# While requests come in together, how long the writer waits after the first for the others. Measured with
# the api alone under 16 connections (docs/benchmarks.md): fuller transactions, more 202s a second.
GATHER_SECONDS = 0.0003
STOP_TIMEOUT_SECONDS = 30.0

Outcome = intake.Accepted | BaseException  # an IdempotencyConflict among the exceptions


@dataclass(frozen=True)
class _Pending:
    request: intake.Prepared
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[intake.Accepted]


def _answer(batch: list[_Pending], outcomes: list[Outcome]) -> None:
    """Settle each request's future with its outcome, on its own loop: one call per loop for the whole
    batch (each call wakes the loop)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[intake.Accepted], Outcome]]] = {}
    for pending, outcome in zip(batch, outcomes, strict=True):
        by_loop.setdefault(pending.loop, []).append((pending.future, outcome))
    for loop, settled in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, settled)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass


def _settle(settled: list[tuple[asyncio.Future[intake.Accepted], Outcome]]) -> None:
    for future, outcome in settled:
        if future.done():
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


def accept_all(
    conn: Connection, requests: list[intake.Prepared]
) -> list[intake.Accepted | IdempotencyConflict]:
    """`intake.accept` for each request, in the caller's transaction (`intake.accept_prepared`). A
    conflicting key is that request's outcome alone (it is refused before anything is written); any other
    error aborts the whole batch."""
    return intake.accept_prepared(conn, requests)


class GroupCommitter:
    """One writer thread per process (started on first use) that commits accepted jobs in batches."""

    def __init__(self, engine: Engine, max_batch: int = MAX_BATCH) -> None:
        self._engine = engine
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._received = 0
        self._last_batch = 0  # requests in the last transaction (the writer thread's own)

    async def accept(self, **fields: Any) -> intake.Accepted:
        """Accept one job (the keyword arguments of `intake.accept` without the connection); returns once the
        transaction holding it has committed. Raises what `intake.accept` or the store raised. Its rows are
        built here, before the writer queue (`intake.prepare`)."""
        try:
            request = intake.prepare(**fields)
        except Exception as exc:  # as a batch that failed on this request alone would answer it
            failure = own_failure(exc)
            if failure is exc:
                raise
            raise failure from exc
        loop = asyncio.get_running_loop()
        pending = _Pending(request, loop, loop.create_future())
        self._ensure_started()
        self._received += 1
        self._queue.put(pending)
        return await pending.future

    @property
    def received(self) -> int:
        """How many requests have come to be committed since the start."""
        return self._received

    def close(self) -> None:
        """Commit what is queued, then stop the writer."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(STOP_TIMEOUT_SECONDS)

    def _ensure_started(self) -> None:
        if self._thread is not None:  # the usual case, without the lock
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._write_loop, name="group-commit", daemon=True)
                self._thread.start()

    def _write_loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            if self._last_batch > 1:
                time.sleep(GATHER_SECONDS)
            more, stop = self._take_waiting(self._max_batch - 1)
            batch = [first, *more]
            if self._commit(batch, stop) or stop:
                return
            self._last_batch = len(batch)  # topped up in the transaction, too

    def _take_waiting(self, limit: int) -> tuple[list[_Pending], bool]:
        """Whatever requests are already waiting, up to `limit`, and whether the stop marker came next."""
        taken: list[_Pending] = []
        while len(taken) < limit:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                return taken, True
            taken.append(item)
        return taken, False

    def _commit(self, batch: list[_Pending], stopped: bool) -> bool:
        """Commit `batch` (topped up with what arrived meanwhile, unless the stop marker was `stopped` at
        already) and answer each request; True when the stop marker was met while topping up."""
        stop: list[bool] = [True] if stopped else []
        outcomes: list[Outcome]
        try:
            outcomes = list(intake.accept_committed(self._engine, partial(self._topped_up, batch, stop)))
        except db.StoreUnavailable as exc:  # not any request's fault: each gets it
            outcomes = [exc] * len(batch)
        except Exception as exc:  # rolled back, perhaps because of one request
            outcomes = self._one_by_one(batch, exc)
        _answer(batch, outcomes)
        return bool(stop)

    def _one_by_one(self, batch: list[_Pending], failure: Exception) -> list[Outcome]:
        """After `batch` failed with `failure`: each request's outcome in a transaction of its own. Once
        the store is unavailable, the requests not yet tried get that too."""
        if len(batch) == 1:
            return [own_failure(failure)]
        log.warning("a batch of %d submissions failed (%r): committing them one by one", len(batch), failure)
        outcomes: list[Outcome] = []
        for pending in batch:
            if outcomes and isinstance(outcomes[-1], db.StoreUnavailable):
                outcomes.append(outcomes[-1])
                continue
            try:
                outcomes.extend(db.transact(self._engine, accept_all, [pending.request]))
            except db.StoreUnavailable as exc:
                outcomes.append(exc)
            except Exception as exc:
                outcomes.append(own_failure(exc))
        return outcomes

    def _topped_up(self, batch: list[_Pending], stop: list[bool]) -> list[intake.Prepared]:
        """In the transaction, once it heads the writer queue: add the requests that queued while it waited
        (to `batch`, so a rerun keeps them); the requests to accept."""
        if not stop:
            more, stopped = self._take_waiting(self._max_batch - len(batch))
            batch.extend(more)
            stop.extend([True] if stopped else [])
        return [p.request for p in batch]


def own_failure(exc: Exception) -> Exception:
    """What one request that failed in a transaction of its own is answered: `Unstorable` when the database
    refused one of its values; otherwise the error itself, logged (a bug, not the request's fault)."""
    if isinstance(exc, DataError | UnicodeEncodeError):
        log.warning("a submission was refused by the store: %s", exc)
        return Unstorable(_first_line(exc))
    log.error("a submission failed", exc_info=exc)
    return exc


def _first_line(exc: Exception) -> str:
    text = str(getattr(exc, "orig", None) or exc)
    return text.splitlines()[0] if text else type(exc).__name__

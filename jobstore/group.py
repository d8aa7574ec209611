"""Group commit: many threads' small write transactions share one commit.

SQLite commits one transaction at a time, and with `synchronous=FULL` each commit costs an fsync. Under
load, callers that arrive while a commit is in flight queue up; the next caller to find no commit in flight
becomes the leader, runs every queued call in ONE transaction (each in its own SAVEPOINT, so one call's
failure rolls back only that call) and commits. Each caller returns only after the commit that holds its
write, so durability per call is exactly as with its own transaction. With no contention a call commits
alone at once: nothing waits on a timer."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine

from jobstore.db import Retry, transact

SAVEPOINT_RETRIES = 3


@dataclass
class _Call:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    done: bool = False
    value: Any = None
    error: BaseException | None = None


class GroupCommitter:
    """Runs `fn(conn, *args, **kwargs)` calls from many threads in shared transactions."""

    def __init__(self, engine: Engine, max_batch: int = 128) -> None:
        self._engine = engine
        self._max_batch = max_batch
        self._cond = threading.Condition()
        self._queue: list[_Call] = []
        self._leading = False
        self.commits = 0
        self.calls = 0

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run the call in a shared transaction; return its value (or raise its error) after the commit."""
        call = _Call(fn, args, kwargs)
        with self._cond:
            self._queue.append(call)
        while not call.done:
            batch = self._lead_or_wait(call)
            if batch:
                try:
                    self._commit(batch)
                finally:
                    with self._cond:
                        self._leading = False
                        self._cond.notify_all()
        if call.error is not None:
            raise call.error
        return call.value

    def _lead_or_wait(self, call: _Call) -> list[_Call]:
        """Become the leader and take a batch, or wait until the current leader is done."""
        with self._cond:
            while self._leading and not call.done:
                self._cond.wait()
            if call.done:
                return []
            self._leading = True
            batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
            return batch

    def _commit(self, batch: list[_Call]) -> None:
        try:
            transact(self._engine, self._run_batch, batch)
            self.commits += 1
            self.calls += len(batch)
        except BaseException as exc:  # the transaction failed as a whole: every call in it failed
            for call in batch:
                call.value, call.error = None, exc
        for call in batch:
            call.done = True

    @staticmethod
    def _run_batch(conn: Connection, batch: list[_Call]) -> None:
        for call in batch:
            call.value, call.error = None, None
            for _ in range(SAVEPOINT_RETRIES):
                savepoint = conn.begin_nested()
                try:
                    call.value = call.fn(conn, *call.args, **call.kwargs)
                except Retry as exc:
                    savepoint.rollback()
                    call.error = exc
                    continue
                except Exception as exc:
                    savepoint.rollback()
                    call.error = exc
                    break
                savepoint.commit()
                call.error = None
                break

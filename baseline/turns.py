"""Whose turn it is to write. SQLite admits one writer at a time, and a writer that finds the lock taken
retries it; with many baseline workers retrying at once, the retries burn the CPU the lock holder needs.
So baseline workers on one host queue for a turn, and only the holder of the turn tries the store.

SQLite still decides who writes (the API, the lease keepers and other clients take no turns); a turn only
keeps baseline workers from crowding the lock. WAL already requires every process using the database to
run on the same host, so an advisory lock on a file beside the database reaches all of them, and the
kernel frees a crashed holder's turn with its process."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)


class WriteTurn:
    """An exclusive turn, shared by this process's threads and, given a `path`, by every process that opens
    the same path. Waiting is bounded: after `timeout` seconds the caller goes ahead without a turn, and
    the store's own lock timeout applies as it would without turns.

    The file lock is taken by a helper thread with a blocking `flock`, so waiters sleep in the kernel until
    the turn is free instead of polling; the caller only waits, with a timeout, for the helper to hand the
    turn over. A turn the helper gets after its caller gave up is given back at once."""

    def __init__(self, path: Path | None, timeout: float) -> None:
        self._timeout = timeout
        self._mutex = threading.Lock()  # one thread of this process asks at a time
        self._changed = threading.Condition()
        self._pending: object | None = None  # the request the helper should serve next
        self._holder: object | None = None  # the request that holds the turn now
        self._fd = _open(path) if path is not None else None
        self._serving = self._fd is not None
        if self._fd is not None:
            threading.Thread(target=self._serve, name="write-turn", daemon=True).start()

    @contextmanager
    def taken(self) -> Iterator[bool]:
        """Hold the turn for the block; yields False when the caller went ahead without the shared turn
        (it waited `timeout`, or shared turns are off)."""
        deadline = time.monotonic() + self._timeout
        if not self._mutex.acquire(timeout=self._timeout):
            yield False
            return
        try:
            if not self._serving:
                yield False
                return
            had = self._request(max(0.0, deadline - time.monotonic()))
            try:
                yield had
            finally:
                if had:
                    self._give_back()
        finally:
            self._mutex.release()

    def _request(self, timeout: float) -> bool:
        request = object()
        with self._changed:
            self._pending = request
            self._changed.notify_all()
            self._changed.wait_for(lambda: self._holder is request or not self._serving, timeout)
            self._pending = None
            return self._holder is request

    def _give_back(self) -> None:
        with self._changed:
            self._holder = None
            self._changed.notify_all()

    def _serve(self) -> None:
        try:
            self._serve_turns()
        except Exception:  # without the helper, this process's threads still take turns among themselves
            log.exception("shared write turns stopped")
            with self._changed:
                self._serving = False
                self._changed.notify_all()

    def close(self) -> None:
        """Stop the helper and close the file; later callers take turns only among this process's threads."""
        with self._changed:
            self._serving = False
            self._changed.notify_all()

    def _serve_turns(self) -> None:
        assert self._fd is not None
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._pending is not None or not self._serving)
                if not self._serving:
                    os.close(self._fd)
                    return
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            with self._changed:
                if self._pending is not None:
                    self._holder, self._pending = self._pending, None
                    self._changed.notify_all()
                    self._changed.wait_for(lambda: self._holder is None)
            fcntl.flock(self._fd, fcntl.LOCK_UN)


def _open(path: Path) -> int | None:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        log.warning("no shared write turns (%s): only this process's threads take turns", exc)
        return None

"""The writer queue: the writers of one SQLite store wait in line for its write lock. SQLite admits one
writer at a time and offers a writer that finds the lock taken only a sleeping retry (its busy handler sleeps
1, 2, 5, 10 ms and more; our own retry sleeps less, but still sleeps and burns CPU on every try). So every
write transaction of `db.transact` first takes its place in the writer queue: writers of one process queue
on a mutex, and processes on one host queue in the kernel on an advisory `flock` of a file beside the
database. The writer at the head of the queue finds SQLite's lock free (unless a program that does not
queue holds it) and the next writer is woken the moment the head leaves the queue.

WAL already requires every process using the database to run on the same host, so the file lock reaches all
of them, and the kernel releases a crashed writer's place with its process. Waiting is always bounded: a
caller that does not reach the head of the queue within its timeout goes ahead without it (or gives up), as
it would without a queue.
"""

from __future__ import annotations

import collections
import fcntl
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

# A helper thread with nothing to wait for ends after this long; the next contended wait starts another.
HELPER_IDLE_SECONDS = 5.0


class _Request:
    """One wait for the head of the shared queue, handed to the helper thread."""

    __slots__ = ("abandoned", "granted")

    def __init__(self) -> None:
        self.granted = threading.Lock()
        self.granted.acquire()  # released by the helper once the file lock is ours
        self.abandoned = False


class WriterQueue:
    """A queue for one exclusive hold, shared by this process's threads and, given a `path`, by every process
    that opens the same path. `acquire` waits at most its timeout and says whether the caller reached the
    head of the queue.

    With nobody ahead, the caller takes the head itself with a non-blocking `flock`. Otherwise a helper
    thread waits for it with a blocking `flock`, so waiters sleep in the kernel until the head is free
    instead of polling; the caller only waits, with a timeout, for the helper to hand it over. When the
    helper reaches the head for a caller that gave up, it leaves at once."""

    def __init__(self, path: Path | None, timeout: float) -> None:
        self._path = path
        self._timeout = timeout
        self._mutex = threading.Lock()  # one thread of this process holds or asks for the head at a time
        self._state = threading.Condition()
        self._requests: collections.deque[_Request] = collections.deque()
        self._unresolved = 0  # requests the helper has not granted or given back yet
        self._helper: threading.Thread | None = None
        self._holder: int | None = None  # the thread at the head of the queue
        self._closed = False
        self._fd: int | None = None
        self._pid = 0
        self._finalizer: weakref.finalize | None = None

    # -- reaching and leaving the head -----------------------------------------------------------------

    def held_here(self) -> bool:
        """The calling thread is at the head of the queue (a nested write must not wait for itself)."""
        return self._holder == threading.get_ident()

    def acquire(self, timeout: float) -> bool:
        """Reach the head of the queue within `timeout` seconds; True when reached (leave it with
        `release`), False when the wait ran out, in which case nothing is held."""
        deadline = time.monotonic() + timeout
        if not self._mutex.acquire(timeout=max(0.0, timeout)):
            return False
        try:
            got = self._take_shared(deadline)
        except BaseException:
            self._mutex.release()
            raise
        if not got:
            self._mutex.release()
            return False
        self._holder = threading.get_ident()
        return True

    def release(self) -> None:
        """Leave the head of the queue; the next waiter, here or in another process, is woken at once."""
        self._holder = None
        fd = self._fd
        try:
            if fd is not None and not self._closed:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            self._mutex.release()

    @contextmanager
    def taken(self) -> Iterator[bool]:
        """Hold the head of the queue for the block; yields False when the caller goes ahead without it (it
        waited the queue's timeout)."""
        had = self.acquire(self._timeout)
        try:
            yield had
        finally:
            if had:
                self.release()

    def close(self) -> None:
        """Close the file; later callers queue only among this process's threads."""
        with self._state:
            self._closed = True
            self._state.notify_all()

    # -- the shared (file) queue -----------------------------------------------------------------------

    def _take_shared(self, deadline: float) -> bool:
        fd = self._file()
        if fd is None:
            return True
        with self._state:
            quiet = self._unresolved == 0  # a helper still waiting on our file would get our lock too
        if quiet:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
        return self._wait_for_helper(max(0.0, deadline - time.monotonic()))

    def _wait_for_helper(self, timeout: float) -> bool:
        request = _Request()
        with self._state:
            self._requests.append(request)
            self._unresolved += 1
            self._ensure_helper()
            self._state.notify_all()
        if request.granted.acquire(timeout=timeout):
            return True
        with self._state:
            if request.granted.acquire(blocking=False):
                return True  # granted just as the wait ran out
            request.abandoned = True
        return False

    def _ensure_helper(self) -> None:
        if self._helper is None or not self._helper.is_alive():
            self._helper = threading.Thread(target=_serve, args=(weakref.ref(self),), daemon=True)
            self._helper.name = "writer-queue"
            self._helper.start()

    def _next_request(self) -> _Request | None:
        """The helper's next request, or None when it should end (idle for a while, or closed)."""
        with self._state:
            self._state.wait_for(lambda: self._requests or self._closed, HELPER_IDLE_SECONDS)
            if self._closed or not self._requests:
                if not self._closed:
                    self._helper = None
                return None
            return self._requests.popleft()

    def _grant(self, request: _Request, fd: int) -> None:
        """Called by the helper once the file lock is taken for `request`."""
        with self._state:
            self._unresolved -= 1
            if request.abandoned or self._closed:
                fcntl.flock(fd, fcntl.LOCK_UN)
                return
            request.granted.release()

    def _abandon_all(self) -> None:
        with self._state:
            while self._requests:
                self._requests.popleft().abandoned = True
                self._unresolved -= 1
            self._helper = None

    def _file(self) -> int | None:
        """The lock file's descriptor, opened once per process (a forked child opens its own: a lock taken
        through an inherited descriptor would be shared with the parent)."""
        if self._path is None or self._closed:
            return None
        if self._fd is None or self._pid != os.getpid():
            if self._finalizer is not None:
                self._finalizer()  # a parent's descriptor: keeping it would keep the parent's lock alive
            self._fd, self._pid = _open(self._path), os.getpid()
            if self._fd is not None:
                self._finalizer = weakref.finalize(self, os.close, self._fd)
            else:
                self._path = None
        return self._fd


def _serve(ref: weakref.ReferenceType[WriterQueue]) -> None:
    """The helper thread: block on the file lock for each request in order. It holds its queue only weakly,
    so a queue nobody uses any more is collected (and its file closed) after the helper's idle wait."""
    while True:
        queue = ref()
        if queue is None:
            return
        request = queue._next_request()
        fd = queue._fd
        if request is None or fd is None:
            return
        if request.abandoned:
            with queue._state:
                queue._unresolved -= 1
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # without the helper, this process's threads still queue among themselves
            log.exception("the shared writer queue stopped")
            queue._abandon_all()
            queue.close()
            return
        queue._grant(request, fd)
        del queue


_shared: weakref.WeakValueDictionary[tuple[int, str], WriterQueue] = weakref.WeakValueDictionary()
_shared_lock = threading.Lock()


def shared_writer_queue(path: Path) -> WriterQueue:
    """The one queue this process joins on `path` (every engine on one database shares it: two queues of
    one process on one file would make its threads wait for each other in the kernel)."""
    key = (os.getpid(), str(path.resolve()))
    with _shared_lock:
        queue = _shared.get(key)
        if queue is None:
            queue = WriterQueue(path, timeout=0.0)
            _shared[key] = queue
        return queue


def _open(path: Path) -> int | None:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        log.warning("no shared writer queue (%s): only this process's threads queue", exc)
        return None

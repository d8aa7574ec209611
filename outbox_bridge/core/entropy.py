"""Random bytes from the operating system, read a page at a time.

Every accepted job takes 16 random bytes for its id, every attempt 10 for its own. `os.urandom` is a system
call that lets go of the interpreter's lock: in the api, whose event loop shares the lock with the group
commit's thread, taking it back cost more than the call itself (about 14 us a job id under load, a tenth of
the event loop's own work per accepted job). `random_bytes` hands out slices of one `os.urandom` read of
`PAGE_BYTES` instead, so one system call serves a couple of hundred ids. The bytes are the operating system's
CSPRNG output all the same, each handed out once.

A forked child must not hand out what its parent will too (two processes, the same ids): the page is dropped
in the child, which reads its own.
"""

from __future__ import annotations

import os
import threading

PAGE_BYTES = 4096


class _Pool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._page = b""
        self._at = 0

    def take(self, count: int) -> bytes:
        if count > PAGE_BYTES:
            return os.urandom(count)
        with self._lock:
            at = self._at
            if at + count > len(self._page):
                self._page, at = os.urandom(PAGE_BYTES), 0
            self._at = at + count
            return self._page[at : at + count]

    def forget(self) -> None:
        """In a forked child: nothing of the parent's page, and a lock no parent's thread can be holding."""
        self._lock = threading.Lock()
        self._page = b""
        self._at = 0


_pool = _Pool()
os.register_at_fork(after_in_child=_pool.forget)


def random_bytes(count: int) -> bytes:
    """`count` bytes from the operating system's random source, none of them handed out before."""
    return _pool.take(count)

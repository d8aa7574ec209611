"""When the relay leases again: at once when a writer rings its doorbell with rows due now, on a timer for
rows announced to come due later, and on a slow poll for rows nobody announced (see `jobstore.doorbells`).

Without a doorbell (a PostgreSQL store, or a directory the relay cannot write) the relay polls at
`relay_poll_seconds`, as it always did."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pika.adapters.select_connection import IOLoop, PollEvents

from core import clock
from core.settings import Settings
from jobstore import db, doorbells

# With a doorbell, the poll only finds rows no ring announced: written by a program that does not ring, or
# left by a relay whose lease on them ran out.
FALLBACK_POLL_SECONDS = 1.0


class Wakeups:
    """The relay's doorbell, on the relay's IOLoop: `wake()` runs on the loop when rows come due."""

    def __init__(self, settings: Settings, ioloop: IOLoop, wake: Callable[[], None]) -> None:
        database = db.sqlite_path(settings)
        directory = doorbells.directory_for(database) if database else None
        self._doorbell = doorbells.Doorbell.open(directory) if directory else None
        self._ringer = doorbells.Ringer(directory) if directory and self._doorbell else None
        self._ioloop = ioloop
        self._wake = wake
        self._timer: Any = None
        self._timer_at = math.inf
        poll = settings.relay_poll_seconds
        self.poll_seconds = max(poll, FALLBACK_POLL_SECONDS) if self._doorbell is not None else poll

    @property
    def listening(self) -> bool:
        return self._doorbell is not None

    def start(self) -> None:
        if self._doorbell is not None:
            self._ioloop.add_handler(self._doorbell.fileno(), self._on_ring, PollEvents.READ)

    def stop(self) -> None:
        """Stop listening and remove the doorbell; writers stop ringing it."""
        self._cancel_timer()
        if self._doorbell is not None:
            self._ioloop.remove_handler(self._doorbell.fileno())
            self._doorbell.close()
            self._doorbell = None

    def ring_others(self) -> None:
        """Wake the other relays: this one found more due rows than it could lease at once, and they
        would otherwise find them only at their next poll."""
        if self._ringer is not None and self._doorbell is not None:
            self._ringer.ring(clock.now(), skip=self._doorbell.name)

    def due_at(self, at: float) -> None:
        """Rows come due at `at` (store clock): wake now, or keep one timer for the earliest such time."""
        delay = at - clock.now()
        if delay <= 0:
            self._wake()
            return
        if at >= self._timer_at:
            return
        self._cancel_timer()
        self._timer_at = at
        self._timer = self._ioloop.call_later(delay, self._on_timer)

    def _on_ring(self, _fd: int, _events: int) -> None:
        assert self._doorbell is not None
        due = self._doorbell.take()
        if due is not None:
            self.due_at(due)

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, math.inf
        self._wake()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._ioloop.remove_timeout(self._timer)
        self._timer, self._timer_at = None, math.inf

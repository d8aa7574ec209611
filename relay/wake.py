"""When the relay leases again: at once when a writer's commit announces rows due now, on a timer for rows
announced to come due later, and on a slow poll for rows nobody announced.

The relay listens where its store's driver says (`Driver.listen`): a Unix socket beside a SQLite file that
writers tell after their commit (`drivers.sqlite.notify_sockets`), or a listening connection to PostgreSQL,
whose trigger tells it (`drivers.postgresql.listener`). Without one (a directory the relay cannot write, a
store it cannot listen on) the relay polls at `relay_poll_seconds`. Where the database tells listeners
itself, a listener that is lost, or could not be opened, is opened again every `RELISTEN_SECONDS`, and the
relay leases once when it is back, for what it may have missed."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable
from typing import Any

from pika.adapters.select_connection import IOLoop, PollEvents

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import drivers
from outbox_bridge.jobstore.drivers import ListenerLost, Notifications

log = logging.getLogger(__name__)

# With a notify socket, the poll only finds rows no notification announced: written by a program that does
# not notify, or left by a relay whose lease on them ran out.
FALLBACK_POLL_SECONDS = 1.0
RELISTEN_SECONDS = 5.0


class Wakeups:
    """What the relay listens on, on the relay's IOLoop: `wake()` runs on the loop when rows come due."""

    def __init__(self, settings: Settings, ioloop: IOLoop, wake: Callable[[], None]) -> None:
        self._settings = settings
        self._driver = drivers.for_url(settings.database_url)
        self._listener: Notifications | None = None
        self._ioloop = ioloop
        self._wake = wake
        self._timer: Any = None
        self._timer_at = math.inf
        self._relisten: Any = None
        self._started = False

    @property
    def poll_seconds(self) -> float:
        poll = self._settings.relay_poll_seconds
        return max(poll, FALLBACK_POLL_SECONDS) if self.listening else poll

    @property
    def listening(self) -> bool:
        return self._listener is not None

    def start(self) -> None:
        self._started = True
        self._listen()

    def stop(self) -> None:
        """Stop listening (a SQLite notify socket is removed: writers stop notifying it)."""
        self._started = False
        self._cancel_timer()
        if self._relisten is not None:
            self._ioloop.remove_timeout(self._relisten)
            self._relisten = None
        self._stop_listening()

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

    def _listen(self) -> None:
        self._relisten = None
        if not self._started:
            return
        self._listener = self._driver.listen(self._settings, role="relay")
        if self._listener is None:
            if self._driver.announces_commits():  # a server that may answer again
                self._relisten = self._ioloop.call_later(RELISTEN_SECONDS, self._listen)
            return
        self._ioloop.add_handler(self._listener.fileno(), self._on_notified, PollEvents.READ)
        self._wake()  # rows committed while nobody listened were announced to no one

    def _on_notified(self, _fd: int = -1, _events: int = 0) -> None:
        assert self._listener is not None
        try:
            due = self._listener.take()
        except ListenerLost as exc:
            self._lost(exc)
            return
        if due is not None:
            self.due_at(due)

    def _lost(self, exc: ListenerLost) -> None:
        log.warning(
            "lost the connection listening for committed outbox rows (%s): polling until it is back", exc
        )
        self._stop_listening()
        self._relisten = self._ioloop.call_later(RELISTEN_SECONDS, self._listen)

    def _stop_listening(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            # A PostgreSQL connection that failed has had its socket closed by libpq already: the poller has
            # forgotten it, and only pika's own bookkeeping needs clearing (its unregister then fails:
            # harmless).
            with contextlib.suppress(OSError):
                self._ioloop.remove_handler(listener.fileno())
            listener.close()

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, math.inf
        self._wake()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._ioloop.remove_timeout(self._timer)
        self._timer, self._timer_at = None, math.inf

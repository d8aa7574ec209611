"""An idle store writer woken by commits instead of waiting out its poll pause.

A baseline worker process listens for the store's notifications (`Driver.listen`: the notify socket beside
a SQLite file, LISTEN on PostgreSQL). When a commit announces rows that are due, the process's store writer
(`worker.writer`) is nudged to claim at once; rows announced for later nudge it when they come due. A
writer that is never nudged still polls at its idle pause, so a listener that is missing or lost costs
latency, never work.
"""

from __future__ import annotations

import logging
import math
import select
import threading
from collections.abc import Callable

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import drivers
from outbox_bridge.jobstore.drivers import ListenerLost, Notifications

log = logging.getLogger(__name__)

# How long the listening thread waits at most between looks at the stop flag (and, without a listener,
# between attempts to open one).
WATCH_SECONDS = 1.0
REOPEN_SECONDS = 5.0


class Listening:
    """The thread that listens for the store's notifications and calls `nudge()` when rows come due."""

    def __init__(self, settings: Settings, nudge: Callable[[], None], stopping: threading.Event) -> None:
        self._settings = settings
        self._nudge = nudge
        self._stopping = stopping
        self._listener: Notifications | None = None
        self._due_at = math.inf
        self._thread = threading.Thread(target=self._loop, name="notify-listener", daemon=True)

    def start(self) -> Listening:
        self._thread.start()
        return self

    @property
    def listening(self) -> bool:
        """A listener is open now (else idle threads only poll)."""
        return self._listener is not None

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _loop(self) -> None:
        try:
            while not self._stopping.is_set():
                if self._listener is None and not self._open():
                    self._stopping.wait(REOPEN_SECONDS)
                    continue
                self._listen_once()
        finally:
            self._close()

    def _open(self) -> bool:
        self._listener = drivers.for_url(self._settings.database_url).listen(self._settings, role="worker")
        if self._listener is not None:
            self._nudge()  # rows committed while nobody listened were announced to no one
        return self._listener is not None

    def _listen_once(self) -> None:
        assert self._listener is not None
        timeout = min(WATCH_SECONDS, max(0.0, self._due_at - clock.now()))
        readable, _, _ = select.select([self._listener], [], [], timeout)
        if readable:
            try:
                due = self._listener.take()
            except ListenerLost as exc:
                log.warning("lost the connection listening for committed jobs (%s): polling meanwhile", exc)
                self._close()
                return
            if due is not None:
                self._due_at = min(self._due_at, due)
        if self._due_at <= clock.now():
            self._due_at = math.inf
            self._nudge()

    def _close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

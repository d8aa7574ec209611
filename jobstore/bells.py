"""The doorbell a process listens on to hear that outbox rows were committed: the Unix socket beside a
SQLite file (`jobstore.doorbells`) or a listening connection on PostgreSQL (`jobstore.notifications`)."""

from __future__ import annotations

from typing import Protocol

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import drivers


class Bell(Protocol):
    def fileno(self) -> int: ...

    def take(self) -> float | None:
        """The earliest due time rung since the last call, or None; `ListenerLost` when the bell broke."""

    def close(self) -> None: ...


def open_bell(settings: Settings, role: str) -> Bell | None:
    """A bell for this store, listened on as `role`; None where there is none (an in-memory store, a
    directory that cannot be written, a PostgreSQL that does not answer): the caller polls."""
    return drivers.for_url(settings.database_url).bell(settings, role)

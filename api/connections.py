"""Bounds on the api's HTTP connections, so that slow or idle clients cannot hold it.

uvicorn closes a connection that stays idle `timeout_keep_alive` seconds after a response, but nothing
while a request's head is still arriving: a client that sends a byte now and then ("slowloris") holds its
connection forever, and enough of them hold every file descriptor. `BoundedHttpToolsProtocol` (uvicorn's
fast parser, used when `httptools` is installed, as it is with the project) and `BoundedH11Protocol` (the
pure-Python one) add:

- a head deadline: from the moment a connection opens, or a response on it completes, the next request's
  head (request line and headers) must arrive within `header_timeout_seconds`, or the connection is closed;
- a connection cap: a process holds at most `max_connections` connections; one more is closed at once.

The body's deadline is the app's (`api.limits.BodyLimit`), so a slow body gets an answer, not just a close.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is not installed: the pure-Python parser serves
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

from outbox_bridge.core.settings import Settings

log = logging.getLogger(__name__)

REFUSAL_LOG_INTERVAL_SECONDS = 10.0


@dataclass(frozen=True)
class ConnectionBounds:
    header_timeout_seconds: float
    max_connections: int

    @classmethod
    def of(cls, settings: Settings) -> ConnectionBounds:
        return cls(settings.http_header_timeout_seconds, settings.http_max_connections)


if TYPE_CHECKING:
    _Protocol = H11Protocol
else:
    _Protocol = object


class _Bounded(_Protocol):
    """The bounds, for either of uvicorn's HTTP protocols (mixed in before it). Made per connection by
    uvicorn through `functools.partial(<protocol>, bounds=...)`."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        bounds: ConnectionBounds,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.bounds = bounds
        self._head_deadline: asyncio.TimerHandle | None = None
        self._waiting_after: object = None  # the request cycle the awaited head follows (None: the first)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.bounds.max_connections:
            _refusals.note(self.bounds.max_connections)
            self.transport.close()
            return
        self._await_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is not self._waiting_after:  # a new request's head has arrived
            self._stop_waiting()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.cycle.response_complete:
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        self._stop_waiting()
        self._waiting_after = self.cycle
        self._head_deadline = self.loop.call_later(self.bounds.header_timeout_seconds, self._head_too_slow)

    def _stop_waiting(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_too_slow(self) -> None:
        self._head_deadline = None
        if not self.transport.is_closing():
            log.debug("closing a connection whose request head did not arrive in time")
            self.transport.close()


class BoundedH11Protocol(_Bounded, H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request head and a cap on connections."""


if HttpToolsProtocol is not None:

    class BoundedHttpToolsProtocol(_Bounded, HttpToolsProtocol):  # type: ignore[misc]
        """uvicorn's httptools protocol with a deadline for each request head and a cap on connections."""

    BoundedProtocol: type[_Bounded] = BoundedHttpToolsProtocol
else:
    BoundedProtocol = BoundedH11Protocol


class _Refusals:
    """Connections refused over the cap, logged at most once per interval (a flood must not flood the log)."""

    def __init__(self) -> None:
        self.count = 0
        self.logged_at = -REFUSAL_LOG_INTERVAL_SECONDS

    def note(self, cap: int) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self.logged_at >= REFUSAL_LOG_INTERVAL_SECONDS:
            log.warning("at the cap of %d connections: closed %d new ones", cap, self.count)
            self.count, self.logged_at = 0, now


_refusals = _Refusals()

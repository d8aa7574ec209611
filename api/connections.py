"""Bounds on the api's HTTP connections, so that slow or idle clients cannot hold it.

uvicorn closes a connection that stays idle `timeout_keep_alive` seconds after a response, but nothing
while a request's head is still arriving: a client that sends a byte now and then ("slowloris") holds its
connection forever, and enough of them hold every file descriptor. `BoundedHttpToolsProtocol` (uvicorn's
fast parser, used when `httptools` is installed, as it is with the project) and `BoundedH11Protocol` (the
pure-Python one) add:

- a head deadline: from the moment a connection opens, or a response on it completes, the next request's
  head (request line and headers) must arrive within `header_timeout_seconds`, or the connection is closed;
- a head size bound: a request's head (request line and headers) larger than `max_head_bytes` is answered
  `400 request-head-too-large` and the connection closed, so a connection costs at most that bound plus one
  read of memory however long a header a client streams (uvicorn bounds the head only for its h11 parser);
- a connection cap: a process holds at most `max_connections` connections; one more is closed at once;
- a client's share of it: a process holds at most `max_per_client` connections from one client (its peer
  address: an IPv4 address, or an IPv6 /64, which one host usually has whole); one more from that client
  is closed at once, so a client that opens connections faster than the head deadline closes them cannot
  hold the whole cap. Behind a reverse proxy the peer is the proxy, which must bound each client itself;
- a request answered before its body is whole (one refused for its token) ends its connection: the rest of
  the body is not waited for, and the close lingers as a refusal's does;
- every refusal of the HTTP parser itself (a malformed request line or header, `Content-Length` beside
  `Transfer-Encoding`, an unknown method) answered as `application/problem+json`, as every other answer.

The body's deadline is the app's (`api.edge`), so a slow body gets an answer, not just a close; and the
routes that take a body check the bearer token before they wait for it (`api.routes.submit_route`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is not installed: the pure-Python parser serves
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

from outbox_bridge.api.problems import INVALID_REQUEST, MEDIA_TYPE, REQUEST_HEAD_TOO_LARGE, ProblemType
from outbox_bridge.core.settings import Settings

log = logging.getLogger(__name__)

REFUSAL_LOG_INTERVAL_SECONDS = 10.0
# After a refusal, how long and how much of what the client still sends is read and dropped before the close.
LINGER_SECONDS = 2.0
LINGER_BYTES = 4 << 20


@dataclass(frozen=True)
class ConnectionBounds:
    header_timeout_seconds: float
    max_connections: int
    max_head_bytes: int = 16384
    max_per_client: int | None = None  # None: no share, only the cap

    @classmethod
    def of(cls, settings: Settings) -> ConnectionBounds:
        return cls(
            settings.http_header_timeout_seconds,
            settings.http_max_connections,
            settings.http_max_head_bytes,
            settings.http_max_connections_per_client,
        )


def client_of(peer: tuple[str, int] | None) -> str | None:
    """Whose connection a peer address is, for the per-client share: the IPv4 address, or the /64 of an
    IPv6 one (an IPv4-mapped IPv6 address is its IPv4 address); None when there is no peer address (a
    Unix socket), which no share bounds."""
    if not peer:
        return None
    try:
        address = ipaddress.ip_address(peer[0].split("%", 1)[0])
    except ValueError:
        return peer[0]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


if TYPE_CHECKING:
    _Protocol = H11Protocol
else:
    _Protocol = object


class _Bounded(_Protocol):
    """The bounds, for either of uvicorn's HTTP protocols (mixed in before it). Made per connection by
    uvicorn through `functools.partial(<protocol>, bounds=...)`."""

    _closing_at: asyncio.TimerHandle | None
    _head_bytes: int | None
    client_key: str | None

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
        self._head_bytes = None  # bytes received since the awaited head began (None: not awaiting)
        self._head_tail = b""
        self._closing_at = None  # set once refused: the lingering close
        self._lingered = 0
        self.client_key = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.client_key = client_of(self.client)
        if len(self.connections) > self.bounds.max_connections:
            _refusals.note("at the cap of %d connections: closed %d new ones", self.bounds.max_connections)
            self.transport.close()
            return
        if self._over_client_share():
            _client_refusals.note(
                "a client at its share of %d connections: closed %d new ones from it",
                self.bounds.max_per_client,
            )
            self.transport.close()
            return
        self._await_head()

    def _over_client_share(self) -> bool:
        """Whether this connection's client holds more than its share with it (counted over the process's
        connections, this one included: at most `max_connections` of them)."""
        share, key = self.bounds.max_per_client, self.client_key
        if share is None or key is None or len(self.connections) <= share:
            return False
        held = sum(1 for other in self.connections if getattr(other, "client_key", None) == key)
        return held > share

    def data_received(self, data: bytes) -> None:
        if self._closing_at is not None:  # refused: what the client still sends is read and dropped
            self._drop(len(data))
            return
        if self._head_bytes is not None and self._head_too_large(data):
            self._stop_waiting()
            limit = self.bounds.max_head_bytes
            self._answer_and_close(
                REQUEST_HEAD_TOO_LARGE, f"The request line and headers exceed {limit} bytes."
            )
            return
        super().data_received(data)
        if self.cycle is not self._waiting_after:  # a new request's head has arrived
            self._stop_waiting()

    def _head_too_large(self, data: bytes) -> bool:
        """Count the awaited head's bytes in `data` (up to its blank line, when `data` holds it) before the
        parser sees them: the parser buffers a header line whole, however long. Once the blank line is
        seen, counting stops until the next head is awaited."""
        assert self._head_bytes is not None
        tail = self._head_tail  # the previous chunk's last bytes: the blank line may straddle two chunks
        seen = tail + data
        end = seen.find(b"\r\n\r\n")
        self._head_bytes += len(data) if end < 0 else max(end + 4 - len(tail), 0)
        self._head_tail = seen[-3:]
        too_large = self._head_bytes > self.bounds.max_head_bytes
        if end >= 0:  # the head is whole: what follows is its body (or the next request, counted anew)
            self._head_bytes = None
        return too_large

    def send_400_response(self, msg: str) -> None:
        """The parser's refusal (uvicorn's is plain text), as a problem document."""
        self._answer_and_close(INVALID_REQUEST, "The request is not valid HTTP/1.1.")

    def _answer_and_close(self, problem: ProblemType, detail: str) -> None:
        """Answer `problem` and close, lingering: the answer is followed by our end of the stream, and what
        the client still sends is dropped unread for a moment, so that the close does not reset the
        connection (a reset can destroy the answer before the client reads it)."""
        if self.transport.is_closing() or self._closing_at is not None:
            return
        body = json.dumps(
            {"type": problem.uri, "title": problem.title, "status": problem.status, "detail": detail},
            separators=(",", ":"),
        ).encode()
        lines = [f"HTTP/1.1 {problem.status} {HTTPStatus(problem.status).phrase}".encode()]
        lines += [name + b": " + value for name, value in self.server_state.default_headers]
        lines += [
            b"content-type: " + MEDIA_TYPE.encode(),
            b"content-length: " + str(len(body)).encode(),
            b"connection: close",
        ]
        self.transport.write(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        self._close_lingering()

    def _close_lingering(self) -> None:
        """End our side of the stream after what is written, and close once the client has had a moment to
        read it; what the client sends meanwhile is dropped unread."""
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self._closing_at = self.loop.call_later(LINGER_SECONDS, self.transport.close)
        self._lingered = 0

    def _drop(self, size: int) -> None:
        self._lingered += size
        if self._lingered > LINGER_BYTES:
            self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing() or not self.cycle.response_complete:
            return
        if self.cycle.more_body:
            # Answered before its body was whole (a request refused without a token): the rest of the body
            # is not waited for, so the connection cannot carry another request. Closed lingering, as a
            # reset could destroy the answer.
            self._close_lingering()
            return
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        if self._closing_at is not None:
            self._closing_at.cancel()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        self._stop_waiting()
        self._waiting_after = self.cycle
        self._head_bytes, self._head_tail = 0, b""
        self._head_deadline = self.loop.call_later(self.bounds.header_timeout_seconds, self._head_too_slow)

    def _stop_waiting(self) -> None:
        self._head_bytes = None
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
    """Connections refused over a bound, logged at most once per interval (a flood must not flood the log).
    The log names no client address, as no other api log line does."""

    def __init__(self) -> None:
        self.count = 0
        self.logged_at = -REFUSAL_LOG_INTERVAL_SECONDS

    def note(self, message: str, bound: int | None) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self.logged_at >= REFUSAL_LOG_INTERVAL_SECONDS:
            log.warning(message, bound, self.count)
            self.count, self.logged_at = 0, now


_refusals = _Refusals()  # over the cap
_client_refusals = _Refusals()  # over a client's share

"""A deadline for a whole HTTP request, kept by the sockets of httpcore's connection pool.

httpcore (the library httpx runs on) bounds each step of a request: the connect, each write, each read.
`DeadlineBackend` is a network backend for its pool whose streams cap the timeout of every one of those
operations at the time left until the deadline of the request the calling thread is sending (`deadline`),
and fail at once when none is left. The pool does a request's I/O in the thread that sends it, so the
deadline is the thread's own; a connection kept alive and reused by another thread obeys that thread's.
Outside a `deadline` block the pool's own timeouts apply, unchanged.

The backend also keeps the relay off private networks: unless it is built with `allow_private`, it resolves
the host itself, refuses (`core.destinations.PrivateDestination`) when any address it resolves to is not
public, and connects to the addresses it checked, never to a second answer of the resolver. TLS still
names the URL's host (server name and certificate), and the request's `Host` header is the URL's.

Not bounded by it: resolving the host's name (the system's resolver has timeouts of its own), and the
reads within one TLS handshake, which each get at most the time left when the handshake starts.

Imported on the relay's first webhook request only, as httpcore is.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore

from outbox_bridge.core import destinations

_current = threading.local()


@contextmanager
def deadline(seconds: float) -> Iterator[float]:
    """Within the block, this thread's socket operations on a `DeadlineBackend`'s streams end `seconds`
    from now at the latest (`httpcore.ConnectTimeout`, `WriteTimeout` or `ReadTimeout` past it). Yields
    the deadline, on `time.monotonic()`'s clock."""
    _current.at = time.monotonic() + seconds
    try:
        yield _current.at
    finally:
        _current.at = None


def _capped(timeout: float | None, passed: type[httpcore.TimeoutException]) -> float | None:
    """`timeout` cut to the time left until this thread's deadline; `passed` when none is left."""
    at: float | None = getattr(_current, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise passed("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every operation ends by the calling thread's deadline."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _capped(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _capped(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        capped = _capped(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, capped))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's own synchronous backend, its streams wrapped in `DeadlineStream`; unless `allow_private`,
    it connects only to public addresses."""

    def __init__(self, *, allow_private: bool) -> None:
        self._backend = httpcore.SyncBackend()
        self._allow_private = allow_private

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        if self._allow_private:
            capped = _capped(timeout, httpcore.ConnectTimeout)
            stream = self._backend.connect_tcp(host, port, capped, local_address, socket_options)
            return DeadlineStream(stream)
        try:
            addresses = destinations.checked(host, port)
        except OSError as exc:
            raise httpcore.ConnectError(f"{host} does not resolve: {exc}") from exc
        return self._connect_first(addresses, port, timeout, local_address, socket_options)

    def _connect_first(
        self,
        addresses: list[str],
        port: int,
        timeout: float | None,
        local_address: str | None,
        socket_options: Iterable[Any] | None,
    ) -> httpcore.NetworkStream:
        """A stream to the first of `addresses` (all checked) that accepts, tried in order."""
        failed: httpcore.ConnectError | None = None
        for address in addresses:
            capped = _capped(timeout, httpcore.ConnectTimeout)
            try:
                stream = self._backend.connect_tcp(address, port, capped, local_address, socket_options)
            except httpcore.ConnectError as exc:
                failed = exc
                continue
            return DeadlineStream(stream)
        assert failed is not None  # `checked` returns at least one address
        raise failed

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        capped = _capped(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self._backend.connect_unix_socket(path, capped, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)

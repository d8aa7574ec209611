"""A deadline for a whole HTTP request, kept by the sockets of httpcore's connection pool.

httpcore (the library httpx runs on) bounds each step of a request: the connect, each write, each read.
`DeadlineBackend` is a network backend for its pool whose streams cap the timeout of every one of those
operations at the time left until the deadline of the request the calling thread is sending (`deadline`),
and fail at once when none is left. The pool does a request's I/O in the thread that sends it, so the
deadline is the thread's own; a connection kept alive and reused by another thread obeys that thread's.
Outside a `deadline` block the pool's own timeouts apply, unchanged.

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
    """httpcore's own synchronous backend, its streams wrapped in `DeadlineStream`."""

    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        capped = _capped(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self._backend.connect_tcp(host, port, capped, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        capped = _capped(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self._backend.connect_unix_socket(path, capped, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)

"""The api's count of a request head's bytes (`api.connections`), fed as the network splits it: what follows
the head's blank line (a body) is not counted, wherever the chunks split that line."""

from __future__ import annotations

import pytest

from outbox_bridge.api.connections import BoundedProtocol, ConnectionBounds

HEAD = b"POST /jobs HTTP/1.1\r\nHost: a\r\nContent-Length: 5000\r\n\r\n"


def counter(limit: int) -> BoundedProtocol:
    protocol = BoundedProtocol.__new__(BoundedProtocol)
    protocol.bounds = ConnectionBounds(header_timeout_seconds=1, max_connections=1, max_head_bytes=limit)
    protocol._head_bytes, protocol._head_tail = 0, b""
    return protocol


@pytest.mark.parametrize("split", range(len(HEAD) + 1))
def test_a_body_after_the_head_is_not_counted_wherever_the_chunks_split(split: int) -> None:
    protocol = counter(len(HEAD))
    request = HEAD + b"x" * 5000
    assert not protocol._head_too_large(request[:split])
    if protocol._head_bytes is not None:  # the head is not whole yet
        assert not protocol._head_too_large(request[split:])
    assert protocol._head_bytes is None


def test_a_head_one_byte_past_the_bound_is_too_large() -> None:
    assert counter(len(HEAD) - 1)._head_too_large(HEAD + b"body")


def test_a_header_that_never_ends_is_too_large_once_past_the_bound() -> None:
    protocol = counter(1024)
    assert not protocol._head_too_large(b"GET / HTTP/1.1\r\nX: " + b"a" * 1000)
    assert protocol._head_too_large(b"a" * 10)

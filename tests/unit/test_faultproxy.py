"""The tests' fault proxy (`tests.support.faultproxy`): while it refuses, connections are refused and its
port stays its own, so that `listen` finds it free again whatever else runs on the host."""

from __future__ import annotations

import selectors
import socket
import threading

import pytest

from tests.support.faultproxy import FaultProxy


def _connect(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        pass


def test_refusing_keeps_the_port_and_listening_again_accepts() -> None:
    with socket.create_server(("127.0.0.1", 0)) as upstream, FaultProxy(upstream.getsockname()) as proxy:
        _connect(proxy.port)
        proxy.refuse()
        with pytest.raises(ConnectionRefusedError):
            _connect(proxy.port)
        # Another socket cannot take the port meanwhile (before, the port was free while refusing).
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", proxy.port))
        proxy.listen()
        _connect(proxy.port)


def _ready(proxy: FaultProxy, *socks: socket.socket) -> list[tuple[selectors.SelectorKey, int]]:
    """A select batch naming `socks` in this order, as the selector might return it."""
    keys = proxy._selector.get_map()
    return [(keys[sock], selectors.EVENT_READ) for sock in socks]


def test_a_refuse_earlier_in_a_batch_skips_the_closed_listeners_accept() -> None:
    # The order that once killed the proxy thread: one select batch holds the wake-up for `refuse` and, after
    # it, the listener's "a connection waits" entry; the listener is closed by the time that entry is handled.
    with socket.create_server(("127.0.0.1", 0)) as upstream:
        proxy = FaultProxy(upstream.getsockname())  # its thread not started: the test is the loop
        try:
            proxy._open_listener()
            listener = proxy._listener
            assert listener is not None
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=2):
                batch = _ready(proxy, proxy._wake_r, listener)
                proxy._control.put((proxy._close_listener, threading.Event(), []))
                proxy._wake_w.send(b"x")
                proxy._dispatch(batch)
            assert proxy._listener is None
            assert proxy.accepted == 0
        finally:
            proxy.close()


def test_a_dead_proxy_thread_fails_the_next_control_call_with_its_cause() -> None:
    with socket.create_server(("127.0.0.1", 0)) as upstream, FaultProxy(upstream.getsockname()) as proxy:

        def boom() -> None:
            raise ValueError("boom")

        with pytest.raises(RuntimeError, match="thread died") as caught:
            proxy._call(boom)
        assert isinstance(caught.value.__cause__, ValueError)

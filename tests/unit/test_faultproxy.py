"""The tests' fault proxy (`tests.support.faultproxy`): while it refuses, connections are refused and its
port stays its own, so that `listen` finds it free again whatever else runs on the host."""

from __future__ import annotations

import socket

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

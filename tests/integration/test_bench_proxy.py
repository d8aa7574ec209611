"""The benchmark's broker proxy: it passes bytes both ways, resets open connections and refuses new ones
during an outage, and lets connections through again afterwards. A real TCP echo server stands in for
the broker."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from outbox_bridge.bench.proxy import BrokerProxy

# The benchmark makes stores of its own: once, whatever TEST_DATABASES says.
pytestmark = pytest.mark.databases("sqlite")


@pytest.fixture
def echo_server() -> Iterator[tuple[str, int]]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    done = threading.Event()

    def echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[:2]
    done.set()
    thread.join(timeout=2)
    server.close()


def _hung_up(sock: socket.socket) -> bool:
    """True when the peer reset or closed the connection (no data, no timeout)."""
    try:
        return sock.recv(4) == b""
    except ConnectionResetError:
        return True


def _round_trip(port: int, payload: bytes) -> bytes:
    """What comes back through the proxy; b"" when the connection is refused or reset."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(payload)
            received = b""
            while len(received) < len(payload) and (chunk := s.recv(4096)):
                received += chunk
            return received
    except (ConnectionResetError, ConnectionRefusedError, BrokenPipeError):
        return b""


def test_proxy_passes_bytes_both_ways(echo_server: tuple[str, int]) -> None:
    with BrokerProxy(echo_server) as proxy:
        assert _round_trip(proxy.port, b"x" * 100_000) == b"x" * 100_000
        assert proxy.counts.connections == 1


def test_cut_resets_open_connections_and_refuses_new_ones_until_restored(
    echo_server: tuple[str, int],
) -> None:
    with BrokerProxy(echo_server) as proxy:
        held = socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
        held.sendall(b"ping")
        assert held.recv(4) == b"ping"

        proxy.cut()
        assert _hung_up(held)
        held.close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
        assert proxy.counts.cut == 2  # both ends of the held connection

        proxy.restore()
        assert _round_trip(proxy.port, b"back") == b"back"
        proxy.cut()
        proxy.restore()
        assert _round_trip(proxy.port, b"again") == b"again"


def test_reset_style_accepts_and_resets_during_the_outage(echo_server: tuple[str, int]) -> None:
    with BrokerProxy(echo_server, style="reset") as proxy:
        held = socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
        held.sendall(b"ping")
        assert held.recv(4) == b"ping"

        proxy.cut()
        assert _hung_up(held)
        held.close()
        assert _round_trip(proxy.port, b"during the outage") == b""
        assert proxy.counts.cut == 2  # both ends of the held connection
        assert proxy.counts.refused >= 1

        proxy.restore()
        assert _round_trip(proxy.port, b"back") == b"back"


def test_url_for_keeps_credentials_and_vhost() -> None:
    proxy = BrokerProxy(("127.0.0.1", 5672))
    try:
        url = proxy.url_for("amqp://guest:secret@rabbit.internal:5672/%2F")
        assert url == f"amqp://guest:secret@127.0.0.1:{proxy.port}/%2F"
    finally:
        proxy.close()

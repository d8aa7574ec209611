"""What one client can hold of a real `outbox-bridge api` process: no more than its share of the connection
cap, whatever it opens, so other clients are still served; and without a token, not even the time its body
would take to arrive. And HEAD through the real server: the GET's head, no body."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest

from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, migrate
from tests.conftest import make_settings
from tests.support import procs

pytestmark = [pytest.mark.slow, pytest.mark.databases("sqlite")]

CAP, SHARE = 40, 10
# Far longer than any test here takes, so that whatever the server closes, it closes for a bound, not a
# timeout.
TIMEOUT_SECONDS = 60.0
# Another address of the loopback interface: a second client on the same host.
OTHER_CLIENT = "127.0.0.2"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, int]]:
    directory = tmp_path_factory.mktemp("clients")
    settings = make_settings(
        directory,
        http_max_connections=CAP,
        http_max_connections_per_client=SHARE,
        http_header_timeout_seconds=TIMEOUT_SECONDS,
        http_body_timeout_seconds=TIMEOUT_SECONDS,
    )
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    engine.dispose()
    port = procs.free_port()
    proc = procs.start(["api", "--port", str(port)], settings, directory / "logs", "api")
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/healthz", proc, timeout=30)
        yield settings, port
    finally:
        proc.kill()


def slow_head(port: int, source: str) -> socket.socket:
    """A connection from `source` whose request head has begun and never ends."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")
    return sock


def closed_by_server(sock: socket.socket, wait: float) -> bool:
    """Whether the server has closed `sock` (or does within `wait` seconds)."""
    sock.settimeout(wait)
    try:
        return sock.recv(1024) == b""
    except (TimeoutError, BlockingIOError):
        return False
    except ConnectionResetError:
        return True


def status_line(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    received = b""
    while b"\r\n" not in received:
        chunk = sock.recv(4096)
        if not chunk:
            break
        received += chunk
    return received.split(b"\r\n", 1)[0]


def test_one_clients_many_slow_connections_do_not_keep_another_client_out(
    api: tuple[Settings, int],
) -> None:
    _, port = api
    held = [slow_head(port, OTHER_CLIENT) for _ in range(CAP + 20)]
    try:
        # The first SHARE are held; every one after them is closed at once, though the cap has room.
        assert not any(closed_by_server(sock, 0.2) for sock in held[:SHARE])
        assert all(closed_by_server(sock, 10) for sock in held[SHARE:])
        for _ in range(CAP - SHARE):  # another client gets every connection the cap has left
            with httpx.Client(timeout=10) as client:
                assert client.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        assert not any(closed_by_server(sock, 0) for sock in held[:SHARE])
    finally:
        for sock in held:
            sock.close()


@pytest.mark.parametrize("authorization", ["", "Authorization: Bearer not-a-token\r\n"], ids=["none", "bad"])
def test_a_request_without_a_valid_token_is_refused_before_its_body_is_sent(
    api: tuple[Settings, int], authorization: str
) -> None:
    _, port = api
    head = (
        "POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: 60000\r\nIdempotency-Key: k\r\n{authorization}\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode())
        assert status_line(sock).startswith(b"HTTP/1.1 401 ")


def test_a_body_sent_after_its_refusal_is_dropped_and_the_connection_ends_cleanly(
    api: tuple[Settings, int],
) -> None:
    _, port = api
    head = b"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 60000\r\nIdempotency-Key: k\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        received = sock.recv(65536)
        sock.sendall(b"x" * 60000)  # the body the server did not wait for
        while chunk := sock.recv(65536):  # to the server's end of the stream, never a reset
            received += chunk
    assert received.startswith(b"HTTP/1.1 401 ")
    assert received.count(b"HTTP/1.1 ") == 1, received  # the body was not read as another request


def test_a_request_with_a_valid_token_still_gets_its_body_read(api: tuple[Settings, int]) -> None:
    settings, port = api
    token = issue_token(settings.auth_secret, tenant="acme", user="alice")
    body = b'{"kind": "noop", "payload": {}}'
    head = (
        "POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nIdempotency-Key: k\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode())
        sock.sendall(body[:10])
        sock.sendall(body[10:])
        assert status_line(sock).startswith(b"HTTP/1.1 202 ")


def test_head_through_the_server_sends_the_get_head_and_no_body(api: tuple[Settings, int]) -> None:
    _, port = api
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, rest = received.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 ") and b"content-length: 15" in head.lower()
    # What follows the HEAD's answer is the GET's, whole: no body of the HEAD came between them.
    assert rest.startswith(b"HTTP/1.1 200 ")
    assert rest.endswith(b'{"status":"ok"}')

"""`WEBHOOK_TIMEOUT_SECONDS` bounds a webhook request as a whole: a receiver on 127.0.0.1 that sends its
answer a byte at a time, each byte well within the timeout of one read, is cut off at the request's deadline;
one that answers at once is answered, over a connection kept for the next request."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from outbox_bridge.core import destinations
from outbox_bridge.relay import webhook_request

# No store takes part: once, whatever TEST_DATABASES says.
pytestmark = pytest.mark.databases("sqlite")

ANSWER = b"HTTP/1.1 204 No Content\r\nServer: slow\r\nX-Filler: " + b"x" * 20 + b"\r\n\r\n"
BYTE_EVERY = 0.2  # seconds: the whole answer would take ANSWER's length times this, about 12 s


@dataclass
class Receiver:
    url: str
    connections: int = 0
    bytes_sent: int = 0


@contextmanager
def receiver(answer: Callable[[socket.socket, Receiver, threading.Event], None]) -> Iterator[Receiver]:
    """A receiver on 127.0.0.1 that has `answer` serve each connection it accepts, one at a time, until the
    block ends."""
    listener = socket.create_server(("127.0.0.1", 0))
    made = Receiver(f"http://127.0.0.1:{listener.getsockname()[1]}/hook")
    stop = threading.Event()

    listener.settimeout(0.05)  # a blocked accept() would not see the listener closed

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            made.connections += 1
            with conn:
                conn.settimeout(5.0)
                answer(conn, made, stop)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield made
    finally:
        stop.set()
        listener.close()
        thread.join(5)


def drip(conn: socket.socket, made: Receiver, stop: threading.Event) -> None:
    """Read the request, then send the answer a byte every `BYTE_EVERY` seconds until the client leaves."""
    conn.recv(65536)
    for at in range(len(ANSWER)):
        if stop.wait(BYTE_EVERY):
            return
        try:
            conn.sendall(ANSWER[at : at + 1])
        except OSError:
            return
        made.bytes_sent += 1


def at_once(conn: socket.socket, made: Receiver, _stop: threading.Event) -> None:
    """Answer each request on the connection whole, at once, until the client closes it."""
    pending = b""
    try:
        while True:
            request, pending = _one_request(conn, pending)
            if request is None:
                return
            conn.sendall(ANSWER)
            made.bytes_sent += len(ANSWER)
    except OSError:  # closed by the client with the connection reset
        return


def _one_request(conn: socket.socket, pending: bytes) -> tuple[bytes | None, bytes]:
    """The next whole request on `conn` (its head and the body its Content-Length says, however many reads
    they arrive in), and what came after it; None when the client closed the connection."""
    while b"\r\n\r\n" not in pending:
        chunk = conn.recv(65536)
        if not chunk:
            return None, b""
        pending += chunk
    head, _, rest = pending.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None, b""
        rest += chunk
    return head + b"\r\n\r\n" + rest[:length], rest[length:]


def test_a_receiver_that_drips_its_status_line_is_cut_off_at_the_whole_requests_deadline() -> None:
    pool = webhook_request.new_client(connections=2, allow_private=True)
    with receiver(drip) as slow, pool:
        started = time.monotonic()
        attempted = webhook_request.post(
            pool, slow.url, b"{}", {"content-type": "application/json"}, timeout=1.0
        )
        took = time.monotonic() - started
    assert attempted.status_code is None and not attempted.delivered
    assert attempted.error is not None
    assert "no whole answer within 1 s" in attempted.error and "reading the answer" in attempted.error
    assert took < 3.0, f"the request took {took:.1f} s, its deadline was 1 s"
    assert 0 < slow.bytes_sent < len(ANSWER), "the receiver was cut off while it was still sending"


def test_a_prompt_receiver_is_answered_over_one_kept_connection() -> None:
    pool = webhook_request.new_client(connections=2, allow_private=True)
    with receiver(at_once) as prompt, pool:
        first = webhook_request.post(pool, prompt.url, b"{}", {}, timeout=1.0)
        second = webhook_request.post(pool, prompt.url, b"{}", {}, timeout=1.0)
    assert (first.status_code, first.error) == (204, None) and (second.status_code, second.error) == (
        204,
        None,
    )
    assert prompt.connections == 1, "the second request went over the first one's connection"


def half_body(conn: socket.socket, made: Receiver, stop: threading.Event) -> None:
    """A 2xx status line and headers at once, then a body that stops short of its Content-Length."""
    _one_request(conn, b"")
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst part")
    stop.wait(5.0)


def endless_body(conn: socket.socket, made: Receiver, stop: threading.Event) -> None:
    """A 2xx whose chunked body keeps coming, a chunk every 50 ms, and never ends."""
    _one_request(conn, b"")
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    while not stop.wait(0.05):
        try:
            conn.sendall(b"1000\r\n" + b"x" * 4096 + b"\r\n")
        except OSError:
            return


@pytest.mark.parametrize("answer", [half_body, endless_body])
def test_a_2xx_whose_body_does_not_end_within_the_deadline_is_a_failed_attempt(
    answer: Callable[[socket.socket, Receiver, threading.Event], None],
) -> None:
    pool = webhook_request.new_client(connections=2, allow_private=True)
    with receiver(answer) as hanging, pool:
        attempted = webhook_request.post(pool, hanging.url, b"{}", {}, timeout=0.5)
    assert attempted.status_code == 200 and not attempted.delivered
    assert attempted.error is not None and "no whole answer within 0.5 s" in attempted.error


def test_a_receiver_on_a_private_address_is_refused_at_connect_in_every_spelling() -> None:
    pool = webhook_request.new_client(connections=2, allow_private=False)
    with receiver(at_once) as local, pool:
        port = local.url.rsplit(":", 1)[1].split("/")[0]
        for host in ("127.0.0.1", "2130706433", "0x7f000001", "127.1", "localhost"):
            attempted = webhook_request.post(pool, f"http://{host}:{port}/hook", b"{}", {}, timeout=1.0)
            assert attempted.error is not None and attempted.error.startswith(
                "refused: 127.0.0.1 is a loopback"
            )
            assert not attempted.delivered
        assert local.connections == 0


def test_the_connection_goes_to_the_address_checked_and_the_host_header_is_the_urls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The resolver is asked once per connection and its checked answer is what is connected to: a second
    answer (here the system's, which knows no such name) never is."""
    asked: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    monkeypatch.setattr(destinations, "resolve", resolve)
    monkeypatch.setattr(destinations, "refusal", lambda address: None)  # as if 127.0.0.1 were public
    heads: list[bytes] = []

    def keep_head(conn: socket.socket, made: Receiver, stop: threading.Event) -> None:
        request, _ = _one_request(conn, b"")
        heads.append(request or b"")
        conn.sendall(ANSWER)

    pool = webhook_request.new_client(connections=2, allow_private=False)
    with receiver(keep_head) as local, pool:
        port = local.url.rsplit(":", 1)[1].split("/")[0]
        attempted = webhook_request.post(pool, f"http://hooks.invalid:{port}/hook", b"{}", {}, timeout=2.0)
    assert (attempted.status_code, attempted.error) == (204, None)
    assert asked == ["hooks.invalid"]
    assert f"\r\nHost: hooks.invalid:{port}\r\n".encode() in heads[0]


def test_an_ipv6_literal_url_is_sent_a_bracketed_host_header() -> None:
    heads: list[bytes] = []
    listener = socket.create_server(("::1", 0), family=socket.AF_INET6)
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            request, _ = _one_request(conn, b"")
            heads.append(request or b"")
            conn.sendall(ANSWER)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    pool = webhook_request.new_client(connections=2, allow_private=True)
    with pool:
        attempted = webhook_request.post(pool, f"http://[::1]:{port}/hook", b"{}", {}, timeout=2.0)
    thread.join(2)
    listener.close()
    assert (attempted.status_code, attempted.error) == (204, None)
    assert f"\r\nHost: [::1]:{port}\r\n".encode() in heads[0]

"""Request heads against a real `outbox-bridge api` process: a head past HTTP_MAX_HEAD_BYTES is refused as a
problem document as soon as it passes the bound (whether it arrives at once or never ends), and costs the
process bounded memory; whatever the HTTP parser refuses is a problem document too."""

from __future__ import annotations

import json
import select
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, migrate
from tests.conftest import make_settings
from tests.support import procs

pytestmark = [pytest.mark.slow, pytest.mark.databases("sqlite")]

PROBLEM = "urn:outbox-bridge:problem:"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, int, procs.Proc]]:
    directory = tmp_path_factory.mktemp("heads")
    settings = make_settings(directory)
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    engine.dispose()
    port = procs.free_port()
    proc = procs.start(["api", "--port", str(port)], settings, directory / "logs", "api")
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/healthz", proc, timeout=30)
        yield settings, port, proc
    finally:
        proc.kill()


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def read_answer(sock: socket.socket, timeout: float = 10.0) -> tuple[bytes, dict[str, str], dict]:
    """The whole answer up to the server's close: its status line, headers and JSON body."""
    sock.settimeout(timeout)
    received = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.decode().partition(":") for line in lines)}
    return status, headers, json.loads(body) if body else {}


def assert_problem(answer: tuple[bytes, dict[str, str], dict], slug: str) -> None:
    status, headers, body = answer
    assert status.startswith(b"HTTP/1.1 400 "), answer
    assert headers["content-type"] == "application/problem+json", answer
    assert headers["connection"] == "close"
    assert body["type"] == PROBLEM + slug and body["status"] == 400, body


class Victim(threading.Thread):
    """Another tenant submitting jobs one after another, timing each."""

    def __init__(self, settings: Settings, port: int) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/jobs"
        self.token = issue_token(settings.auth_secret, tenant="victim", user="v")
        self.times: list[float] = []
        self.statuses: set[int] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self.stop.is_set():
                started = time.monotonic()
                answer = client.post(
                    self.url,
                    json={"kind": "noop", "payload": {}},
                    headers={
                        "Authorization": f"Bearer {self.token}",
                        "Idempotency-Key": f"v-{len(self.times)}",
                    },
                )
                self.times.append(time.monotonic() - started)
                self.statuses.add(answer.status_code)
                time.sleep(0.01)


def stream_endless_head(port: int) -> tuple[int, tuple[bytes, dict[str, str], dict]]:
    """A header line that never ends, sent as fast as the connection takes it until the server answers:
    how many bytes went out, and the answer."""
    sent, chunk = 0, b"a" * 65536
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Endless: ")
        while sent < 256 << 20 and not select.select([sock], [], [], 0)[0]:
            try:
                sent += sock.send(chunk)
            except OSError:
                break
        return sent, read_answer(sock)


def test_a_head_that_never_ends_is_refused_at_the_bound_and_the_process_stays_small(
    api: tuple[Settings, int, procs.Proc],
) -> None:
    settings, port, proc = api
    victim = Victim(settings, port)
    victim.start()
    procs.wait_for(lambda: len(victim.times) >= 5, timeout=30, what="the victim's first requests")
    before = len(victim.times)
    rss_before = rss_bytes(proc.pid)

    # Endless heads one after another, until the victim has made five requests meanwhile.
    deadline = time.monotonic() + 60
    attacks = []
    while len(victim.times) < before + 5 and time.monotonic() < deadline:
        attacks.append(stream_endless_head(port))
    rss_after = rss_bytes(proc.pid)

    victim.stop.set()
    victim.join(timeout=15)
    before_ms = [t * 1000 for t in victim.times[:before]]
    during_ms = [t * 1000 for t in victim.times[before:]]
    for sent, answer in attacks:
        assert_problem(answer, "request-head-too-large")
        assert sent < 64 << 20, f"the server read {sent} bytes of one head without answering"
    assert rss_after - rss_before < 32 << 20, (rss_before, rss_after, len(attacks))
    assert victim.statuses == {202}
    assert len(during_ms) >= 5, "the victim was not served while the heads streamed"
    # Not a timing claim, a bound: before heads were bounded, the victim's request took seconds.
    assert statistics.median(during_ms) < 500, (statistics.median(before_ms), statistics.median(during_ms))


def test_a_one_megabyte_header_is_refused_as_a_problem(api: tuple[Settings, int, procs.Proc]) -> None:
    _, port, _ = api
    request = (
        b"GET /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + b"x" * (1 << 20) + b"\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        assert_problem(read_answer(sock), "request-head-too-large")


def test_a_head_within_the_bound_is_served(api: tuple[Settings, int, procs.Proc]) -> None:
    _, port, _ = api
    answer = httpx.get(f"http://127.0.0.1:{port}/healthz", headers={"X-Padding": "p" * 12000}, timeout=10)
    assert answer.status_code == 200


@pytest.mark.parametrize(
    "request_bytes",
    [
        pytest.param(b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-Bad: a\x01b\r\n\r\n", id="control-character"),
        pytest.param(
            b"POST /jobs HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            id="length-and-chunked",
        ),
        pytest.param(b"POST /jobs HTTP/1.1\r\nHost: a\r\nContent-Length: -5\r\n\r\n", id="negative-length"),
        pytest.param(b"BREW /healthz HTTP/1.1\r\nHost: a\r\n\r\n", id="unknown-method"),
        pytest.param(b"GET /healthz HTTP/9.9 extra\r\n\r\n", id="bad-request-line"),
    ],
)
def test_what_the_parser_refuses_is_answered_as_a_problem(
    api: tuple[Settings, int, procs.Proc], request_bytes: bytes
) -> None:
    _, port, _ = api
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request_bytes)
        assert_problem(read_answer(sock), "invalid-request")


def test_a_long_request_line_is_refused_as_a_too_large_head(api: tuple[Settings, int, procs.Proc]) -> None:
    _, port, _ = api
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /jobs?x=" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: a\r\n\r\n")
        assert_problem(read_answer(sock), "request-head-too-large")


def test_an_idempotency_key_that_is_not_utf8_is_refused(api: tuple[Settings, int, procs.Proc]) -> None:
    settings, port, _ = api
    token = issue_token(settings.auth_secret, tenant="keys", user="k")
    body = b'{"kind": "noop", "payload": {}}'
    head = (
        f"POST /jobs HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head + b"Idempotency-Key: \xff\xfe\r\nConnection: close\r\n\r\n" + body)
        status, headers, problem = read_answer(sock)
    assert status.startswith(b"HTTP/1.1 400 ") and headers["content-type"] == "application/problem+json"
    assert problem["type"] == PROBLEM + "invalid-request" and "UTF-8" in problem["detail"]

"""The API as a user runs it: a real `outbox-bridge api` process on a real SQLite file, driven over HTTP,
killed with real signals."""

from __future__ import annotations

import shutil
import signal
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Connection, Engine, func, select

from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.settings import DEV_AUTH_SECRET, Settings
from outbox_bridge.jobstore import db, heartbeats, migrate
from outbox_bridge.jobstore.schema import jobs, outbox
from tests.conftest import make_settings
from tests.support import procs

pytestmark = pytest.mark.slow


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[Settings, Engine]]:
    settings = make_settings(tmp_path, max_body_bytes=4096)
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    yield settings, engine
    engine.dispose()


def start_api(
    settings: Settings, tmp_path: Path, started: list[procs.Proc], name: str, *args: str, **env: str
) -> str:
    port = procs.free_port()
    proc = procs.start(["api", "--port", str(port), *args], settings, tmp_path / "logs", name, **env)
    started.append(proc)
    base = f"http://127.0.0.1:{port}"
    procs.wait_http(f"{base}/healthz", proc, timeout=30)
    return base


def counts(engine: Engine) -> tuple[int, int]:
    """The rows of jobs and outbox, read as the store reads (`db.read`: on SQLite a deferred BEGIN, which
    takes no write lock, so a write of the api's own, its heartbeat's, cannot make the read fail)."""

    def read(conn: Connection) -> tuple[int, int]:
        return (
            conn.execute(select(func.count()).select_from(jobs)).scalar_one(),
            conn.execute(select(func.count()).select_from(outbox)).scalar_one(),
        )

    return db.read(engine, read)


def headers(settings: Settings, key: str) -> dict[str, str]:
    token = issue_token(settings.auth_secret, tenant="acme", user="alice")
    return {"Authorization": f"Bearer {token}", "Idempotency-Key": key}


def test_fifty_concurrent_submissions_with_one_key_create_exactly_one_job(
    store: tuple[Settings, Engine], tmp_path: Path, started: list[procs.Proc]
) -> None:
    settings, engine = store
    base = start_api(settings, tmp_path, started, "api")
    gate = threading.Barrier(50)
    body = {"kind": "noop", "payload": {"order": 1234}}

    def submit(client: httpx.Client) -> httpx.Response:
        gate.wait(timeout=30)
        return client.post(f"{base}/jobs", json=body, headers=headers(settings, "one-key"))

    limits = httpx.Limits(max_connections=50, max_keepalive_connections=50)
    with httpx.Client(timeout=30, limits=limits) as client, ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(submit, [client] * 50))
    assert [r.status_code for r in answers] == [202] * 50
    assert len({r.json()["id"] for r in answers}) == 1
    assert counts(engine) == (1, 1)


def test_a_kill_between_commit_and_response_loses_the_answer_not_the_job(
    store: tuple[Settings, Engine], tmp_path: Path, started: list[procs.Proc]
) -> None:
    settings, engine = store
    body = {"kind": "noop", "payload": {"invoice": 7}}
    doomed = start_api(settings, tmp_path, started, "api-doomed", OUTBOX_BRIDGE_FAULTS="api.after_commit")
    with pytest.raises(httpx.TransportError):
        httpx.post(f"{doomed}/jobs", json=body, headers=headers(settings, "retry-me"), timeout=30)
    assert started[0].wait(10) == -signal.SIGKILL
    assert counts(engine) == (1, 1)  # committed before the kill

    restarted = start_api(settings, tmp_path, started, "api-restarted")
    retry = httpx.post(f"{restarted}/jobs", json=body, headers=headers(settings, "retry-me"), timeout=30)
    assert retry.status_code == 202
    committed_id = db.read(engine, lambda conn: conn.execute(select(jobs.c.id)).scalar_one())
    assert retry.json()["id"] == committed_id
    assert retry.headers["location"] == f"/jobs/{committed_id}"
    assert counts(engine) == (1, 1)


def _read_status_line(sock: socket.socket) -> bytes:
    received = b""
    while b"\r\n" not in received:
        chunk = sock.recv(4096)
        if not chunk:
            break
        received += chunk
    return received.split(b"\r\n", 1)[0]


def test_a_streamed_body_is_refused_with_413_before_the_client_finishes_sending(
    store: tuple[Settings, Engine], tmp_path: Path, started: list[procs.Proc]
) -> None:
    settings, engine = store
    port = int(start_api(settings, tmp_path, started, "api").rsplit(":", 1)[1])
    auth = headers(settings, "big")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        head = (
            "POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n"
            f"Authorization: {auth['Authorization']}\r\nIdempotency-Key: big\r\n\r\n"
        )
        sock.sendall(head.encode())
        chunk = b'{"kind": "noop", "payload": {"pad": "' + b"x" * 1024
        for _ in range(settings.max_body_bytes // 1024 + 1):
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        # The body is not finished (no closing chunk): the answer must come anyway.
        status_line = _read_status_line(sock)
    assert status_line == b"HTTP/1.1 413 Request Entity Too Large"
    assert counts(engine) == (0, 0)


def test_several_workers_serve_one_store_and_sigterm_stops_them_cleanly(
    store: tuple[Settings, Engine], tmp_path: Path, started: list[procs.Proc]
) -> None:
    settings, engine = store
    base = start_api(settings, tmp_path, started, "api-workers", "--workers", "2")
    with httpx.Client(timeout=30) as client:
        views = [
            client.post(
                f"{base}/jobs",
                json={"kind": "noop", "payload": {"n": n}},
                headers=headers(settings, f"w-{n}"),
            ).json()
            for n in range(10)
        ]
        listed = client.get(f"{base}/jobs", params={"limit": 100}, headers=headers(settings, "-")).json()
    assert {v["id"] for v in views} == {item["id"] for item in listed["items"]}

    def api_pids() -> set[int]:
        alive = db.read(engine, heartbeats.alive, time.time(), 60.0)
        return {p.pid for p in alive if p.role == "api"}

    procs.wait_for(lambda: len(api_pids()) == 2, timeout=20, what="a heartbeat from each api worker")
    assert started[0].pid not in api_pids(), "the workers beat, not the process that started them"
    assert started[0].terminate(timeout=30) == 0
    assert counts(engine) == (10, 10)
    assert api_pids() == set(), "a clean stop deletes each worker's heartbeat"


@pytest.mark.databases("sqlite")  # holds the submission with SQLite's write lock
def test_sigterm_lets_a_submission_in_flight_commit_and_answer_then_exits_zero(
    tmp_path: Path, started: list[procs.Proc]
) -> None:
    settings = make_settings(tmp_path, store_lock_timeout_seconds=20.0)
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    base = start_api(settings, tmp_path, started, "api")
    holder = sqlite3.connect(tmp_path / "jobs.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the submission will wait for this lock
    with ThreadPoolExecutor(1) as pool:
        in_flight = pool.submit(
            httpx.post,
            f"{base}/jobs",
            json={"kind": "noop", "payload": {}},
            headers=headers(settings, "in-flight"),
            timeout=30,
        )
        time.sleep(0.5)
        started[0].signal(signal.SIGTERM)
        time.sleep(0.5)
        assert not in_flight.done()
        holder.execute("ROLLBACK")
        holder.close()
        assert in_flight.result(timeout=30).status_code == 202
    assert started[0].wait(30) == 0
    assert counts(engine) == (1, 1)
    engine.dispose()


STORE_UNAVAILABLE = "urn:outbox-bridge:problem:store-unavailable"


def job_ids_in(database: Path) -> set[str]:
    """The ids of the jobs in the SQLite file at `database`, read without the api."""
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as conn:
        return {row[0] for row in conn.execute("SELECT id FROM jobs")}


@pytest.mark.databases("sqlite")  # removes the store's file and directory under the running api
def test_a_store_directory_removed_under_the_api_answers_503_and_no_202_job_is_missing_after_the_restore(
    tmp_path: Path, started: list[procs.Proc]
) -> None:
    directory = tmp_path / "store"
    database = directory / "jobs.db"
    settings = make_settings(tmp_path, database_url=f"sqlite:///{database}")
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    engine.dispose()
    base = start_api(settings, tmp_path, started, "api")
    reader = headers(settings, "-")

    def submit(client: httpx.Client, key: str) -> httpx.Response:
        return client.post(
            f"{base}/jobs", json={"kind": "noop", "payload": {}}, headers=headers(settings, key)
        )

    limits = httpx.Limits(max_connections=10, max_keepalive_connections=10)
    with httpx.Client(timeout=30, limits=limits) as client, ThreadPoolExecutor(10) as pool:
        before = list(pool.map(lambda n: submit(client, f"before-{n}"), range(20)))
        assert [r.status_code for r in before] == [202] * 20
        with (
            closing(sqlite3.connect(database)) as live,
            closing(sqlite3.connect(tmp_path / "backup.db")) as copy,
        ):
            live.backup(copy)

        shutil.rmtree(directory)  # the api's pooled connections still have the removed file open

        gone = list(pool.map(lambda n: submit(client, f"gone-{n}"), range(20)))
        assert [r.status_code for r in gone] == [503] * 20
        assert {r.json()["type"] for r in gone} == {STORE_UNAVAILABLE}
        assert client.get(f"{base}/readyz").status_code == 503
        assert client.get(f"{base}/jobs/{before[0].json()['id']}", headers=reader).status_code == 503
        assert not directory.exists(), "the api re-created no store"

        directory.mkdir()
        (tmp_path / "backup.db").rename(database)
        assert client.get(f"{base}/readyz").status_code == 200
        after = submit(client, "after")
        assert after.status_code == 202

    answered_202 = {r.json()["id"] for r in [*before, *gone, after] if r.status_code == 202}
    assert answered_202 <= job_ids_in(database)
    assert "no store at" in started[0].output(), "the api says why it answers 503"


def test_the_api_refuses_to_start_with_the_built_in_secret_unless_told_it_is_development(
    tmp_path: Path, started: list[procs.Proc]
) -> None:
    settings = make_settings(tmp_path, auth_secret=DEV_AUTH_SECRET, outbox_bridge_dev=False)
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    engine.dispose()
    refused = procs.start(["api", "--port", str(procs.free_port())], settings, tmp_path / "logs", "refused")
    started.append(refused)
    assert refused.wait(30) == 1
    output = refused.output()
    assert "AUTH_SECRET is the built-in development value" in output
    assert "secrets.token_urlsafe(48)" in output
    base = start_api(settings.model_copy(update={"outbox_bridge_dev": True}), tmp_path, started, "dev")
    assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200


class SlowClient:
    """A raw connection that sends `opening`, then a byte whenever told to drip, and notes when (and with what
    answer) the server closes it."""

    def __init__(self, port: int, opening: bytes) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.opened = time.monotonic()
        if opening:
            self.sock.sendall(opening)
        self.sock.setblocking(False)
        self.answer = b""
        self.closed_after: float | None = None

    def drip(self, byte: bytes) -> None:
        if self.closed_after is None:
            try:
                self.sock.send(byte)
            except OSError:
                self._closed()

    def poll(self) -> None:
        while self.closed_after is None:
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._closed()
            self.answer += data

    def _closed(self) -> None:
        self.closed_after = time.monotonic() - self.opened
        self.sock.close()


def watch(clients: list[SlowClient], seconds: float, drip: bytes = b"") -> None:
    """Poll (and drip to) every client ten times a second until all are closed or `seconds` have passed."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(c.closed_after is None for c in clients):
        for client in clients:
            client.poll()
            if drip:
                client.drip(drip)
        time.sleep(0.1)
    for client in clients:
        client.poll()


def test_slow_clients_are_closed_within_the_bounds_and_others_are_served_meanwhile(
    store: tuple[Settings, Engine], tmp_path: Path, started: list[procs.Proc]
) -> None:
    settings, engine = store
    bound, cap, margin = 2.0, 30, 4.0
    bounded = settings.model_copy(
        update={
            "http_header_timeout_seconds": bound,
            "http_body_timeout_seconds": bound,
            "http_max_connections": cap,
        }
    )
    base = start_api(bounded, tmp_path, started, "api")
    port = int(base.rsplit(":", 1)[1])
    auth = headers(settings, "-")["Authorization"]

    # Slow heads never finish their headers; slow bodies send a whole head, then a body far slower than due.
    slow_heads = [
        SlowClient(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ") for _ in range(15)
    ]
    body_head = (
        "POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
    )
    slow_bodies = [
        SlowClient(port, f"{body_head}Authorization: {auth}\r\nIdempotency-Key: slow-{n}\r\n\r\n{{".encode())
        for n in range(8)
    ]
    with httpx.Client(timeout=10) as client:  # while they hold their connections, others are served
        assert client.get(f"{base}/healthz").status_code == 200
        accepted = client.post(
            f"{base}/jobs", json={"kind": "noop", "payload": {}}, headers=headers(settings, "ok")
        )
        assert accepted.status_code == 202
    watch(slow_heads + slow_bodies, bound + margin, drip=b"a")
    for slow in slow_heads + slow_bodies:
        assert slow.closed_after is not None, "a slow client still holds its connection"
        assert bound * 0.9 <= slow.closed_after <= bound + margin
    for slow in slow_bodies:
        assert slow.answer.startswith(b"HTTP/1.1 400 "), slow.answer[:200]
        assert b"urn:outbox-bridge:problem:body-timeout" in slow.answer
    assert counts(engine) == (1, 1)

    # At the cap, a new connection is closed at once; those that fill it wait for the header deadline.
    fillers = [SlowClient(port, b"") for _ in range(cap)]
    over = [SlowClient(port, b"") for _ in range(5)]
    watch(fillers + over, bound + margin)
    early = [c for c in fillers + over if c.closed_after is not None and c.closed_after < bound / 2]
    assert all(c in early for c in over)
    assert len(early) <= len(over) + 2  # a connection from above may not be gone yet; no more than that
    assert all(c.closed_after is not None for c in fillers)
    assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200

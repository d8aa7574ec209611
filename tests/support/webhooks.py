"""What the webhook tests share: endpoints put into a test's store, the deliveries read back, a receiver on
127.0.0.1 that answers as a test tells it to, and the Standard Webhooks signature check written from the
specification (https://www.standardwebhooks.com/), independently of the code under test."""

from __future__ import annotations

import base64
import hmac
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sqlalchemy import Engine, select

from outbox_bridge.core import clock
from outbox_bridge.core.sealing import Sealer
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore import webhooks as store
from outbox_bridge.jobstore.schema import webhook_attempts
from outbox_bridge.jobstore.webhooks import Endpoint, WebhookDelivery


def add_endpoint(
    engine: Engine, settings: Settings, tenant: str, url: str, events: tuple[str, ...] = ()
) -> tuple[Endpoint, str]:
    """An endpoint of `tenant` registered as `webhooks add` does; with its secret (`whsec_...`)."""
    return db.transact(
        engine,
        store.add_endpoint,
        Sealer.of(settings.auth_secret),
        tenant=tenant,
        url=url,
        events=events,
        now=clock.now(),
        actor="tester",
    )


def deliveries(engine: Engine) -> list[WebhookDelivery]:
    return db.read(engine, lambda conn: store.list_deliveries(conn, limit=1000))


def attempt_rows(engine: Engine, delivery_id: str) -> list[dict[str, Any]]:
    query = select(webhook_attempts).where(webhook_attempts.c.delivery_id == delivery_id)
    return db.read(engine, lambda conn: [dict(r) for r in conn.execute(query.order_by("attempt")).mappings()])


def verify(secret: str, headers: dict[str, str], body: bytes, *, tolerance: float = 300.0) -> bool:
    """The Standard Webhooks check: some `v1,` signature among the space-separated ones equals base64
    HMAC-SHA256 of `{webhook-id}.{webhook-timestamp}.{body}` under the secret's key, and the timestamp is
    within `tolerance` seconds of now."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    msg_id, timestamp = headers["webhook-id"], headers["webhook-timestamp"]
    if abs(time.time() - int(timestamp)) > tolerance:
        return False
    expected = base64.b64encode(hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, "sha256").digest())
    for versioned in headers["webhook-signature"].split(" "):
        version, _, sig = versioned.partition(",")
        if version == "v1" and hmac.compare_digest(sig.encode(), expected):
            return True
    return False


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    def event(self) -> dict[str, Any]:
        return dict(json.loads(self.body))


@dataclass
class Receiver:
    """A local HTTP receiver. `answer(path, count)` says what to answer the `count`-th request to `path`
    (from 1): a status code, or None to hang until the receiver is closed."""

    url: str
    received: list[Received] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def on(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path == path]

    def wait_for(self, path: str, count: int = 1, timeout: float = 5.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.on(path)
            if len(got) >= count:
                return got
            time.sleep(0.01)
        raise AssertionError(f"{path}: {len(self.on(path))} requests within {timeout}s, wanted {count}")


@contextmanager
def receiver(answer: Callable[[str, int], int | None]) -> Iterator[Receiver]:
    """A `Receiver` on 127.0.0.1 for the `with` block; requests left hanging are let go at its end."""
    holder: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got = holder["receiver"]
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            with got._lock:
                got.received.append(
                    Received(
                        self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic()
                    )
                )
                count = sum(1 for r in got.received if r.path == self.path)
            status = answer(self.path, count)
            if status is None:
                got.released.wait(30)
                return
            self.send_response(status)
            if 300 <= status < 400:
                self.send_header("location", f"http://127.0.0.1:{self.server.server_address[1]}/elsewhere")
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    holder["receiver"] = made = Receiver(f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield made
    finally:
        made.released.set()
        server.shutdown()
        server.server_close()

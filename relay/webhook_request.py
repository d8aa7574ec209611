"""One completion webhook request: the CloudEvents 1.0 structured body, the Standard Webhooks headers, and
the POST itself, whose answer costs bounded time and memory: no redirect followed, the body read to its end
and dropped, and `WEBHOOK_TIMEOUT_SECONDS` for the whole request. Only a 2xx whose body ends within the time
delivers: a status line followed by a body that never ends is a failed attempt.

The limit holds for the whole request, not for each step of it. An HTTP client's timeouts bound each step (the
connect, each write, each read), so a receiver that sends its answer a byte at a time, each byte within the
timeout, would hold a sender thread for as long as it liked. The relay's connection pool (httpcore's, which
httpx runs on) opens its connections through `webhook_deadline.DeadlineBackend`, and `post` sets the request's
deadline: every socket operation of the request (connecting, sending, reading the status line, the headers and
the body) then waits at most for the time left, and the request ends with a timeout once none is left. No
timer thread closes anything, and a connection reused by another request obeys that request's deadline.
Resolving the host's name, and each read within a TLS handshake, are bounded otherwise (`webhook_deadline`).
The same backend refuses to connect to a non-public address unless `WEBHOOK_ALLOW_PRIVATE` is set
(`core.destinations`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from outbox_bridge.core import clock
from outbox_bridge.core.destinations import PrivateDestination
from outbox_bridge.core.signatures import signature
from outbox_bridge.jobstore.webhook_deliveries import Attempted
from outbox_bridge.jobstore.webhooks import WebhookDelivery

if TYPE_CHECKING:
    import httpcore

CONTENT_TYPE = "application/cloudevents+json"
SOURCE = "outbox-bridge"
TYPE_PREFIX = "outbox_bridge."
# An idle kept connection is closed after this long (httpx's default).
KEEPALIVE_SECONDS = 5.0


def cloud_event(delivery: WebhookDelivery, view: dict[str, Any]) -> bytes:
    """The delivery as a CloudEvents 1.0 structured JSON event whose `data` is the job's view."""
    event = {
        "specversion": "1.0",
        "id": delivery.id,
        "type": TYPE_PREFIX + delivery.event,
        "source": SOURCE,
        "subject": delivery.job_id,
        "time": clock.isoformat(delivery.occurred_at),
        "datacontenttype": "application/json",
        "data": view,
    }
    return json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode()


def headers(delivery_id: str, timestamp: int, body: bytes, keys: Sequence[bytes]) -> dict[str, str]:
    """The Standard Webhooks headers of `body`, signed with each of `keys`."""
    return {
        "content-type": CONTENT_TYPE,
        "webhook-id": delivery_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(keys, delivery_id, timestamp, body),
    }


def new_client(connections: int, *, allow_private: bool) -> httpcore.ConnectionPool:
    """The relay's one kept pool of connections, its sockets held to each request's deadline and, unless
    `allow_private`, only ever connected to public addresses; redirects are answers, not followed. httpcore
    is imported here, on first use: a relay that sends no webhooks never loads it."""
    import httpcore

    from outbox_bridge.relay.webhook_deadline import DeadlineBackend

    return httpcore.ConnectionPool(
        max_connections=connections,
        max_keepalive_connections=connections,
        keepalive_expiry=KEEPALIVE_SECONDS,
        network_backend=DeadlineBackend(allow_private=allow_private),
    )


def post(
    client: httpcore.ConnectionPool, url: str, body: bytes, sent_headers: dict[str, str], timeout: float
) -> Attempted:
    """POST `body` to `url` within `timeout` seconds from the first byte to the last, connecting included,
    the answer's body read to its end; what the answer was (its status, and why it did not deliver) and how
    long it took."""
    import httpcore
    import httpx

    from outbox_bridge.relay.webhook_deadline import deadline

    at, started = clock.now(), time.monotonic()
    status: int | None = None
    error: str | None = None
    steps = dict.fromkeys(("connect", "read", "write", "pool"), timeout)
    try:
        target, host = _target(url)
        with (
            deadline(timeout),
            client.stream(
                "POST",
                target,
                headers=[("Host", host), *sent_headers.items()],
                content=body,
                extensions={"timeout": steps},
            ) as answer,
        ):
            status = answer.status
            _drain(answer)
    except httpcore.TimeoutException as exc:
        error = f"no whole answer within {timeout:g} s (WEBHOOK_TIMEOUT_SECONDS): {_step(exc)}"
    except PrivateDestination as exc:
        error = str(exc)
    except (
        httpx.InvalidURL,
        httpcore.UnsupportedProtocol,
        httpcore.NetworkError,
        httpcore.ProtocolError,
    ) as exc:
        error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if status is not None and not 200 <= status < 300:
        error = _refusal(status)
    latency_ms = (time.monotonic() - started) * 1000.0
    return Attempted(at=at, status_code=status, latency_ms=latency_ms, error=error)


def _target(url: str) -> tuple[httpcore.URL, str]:
    """`url` as httpcore sends it, its host encoded as IDNA and its path and query percent-encoded (as httpx
    does it); and its `Host` header, an IPv6 address in brackets (`[::1]:8080`)."""
    import httpcore
    import httpx

    parsed = httpx.URL(url)
    target = httpcore.URL(
        scheme=parsed.raw_scheme, host=parsed.raw_host, port=parsed.port, target=parsed.raw_path
    )
    return target, parsed.netloc.decode("ascii")


def _step(exc: Exception) -> str:
    """Which step of the request the deadline cut short."""
    import httpcore

    steps = {
        httpcore.ConnectTimeout: "still connecting",
        httpcore.WriteTimeout: "still sending",
        httpcore.ReadTimeout: "still reading the answer",
        httpcore.PoolTimeout: "still waiting for a connection",
    }
    return next((said for kind, said in steps.items() if isinstance(exc, kind)), type(exc).__name__)


def _drain(answer: httpcore.Response) -> None:
    """Read the answer's body to its end, keeping none of it: the attempt delivers only once it ends."""
    for _chunk in answer.iter_stream():
        pass


def _refusal(status: int) -> str:
    if 300 <= status < 400:
        return f"HTTP {status}: a redirect, not followed (register the URL it points to)"
    return f"HTTP {status}"

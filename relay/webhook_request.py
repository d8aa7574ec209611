"""One completion webhook request: the CloudEvents 1.0 structured body, the Standard Webhooks headers, and
the POST itself, whose answer costs bounded time and memory (no redirect followed, a timeout per step, at
most `MAX_ANSWER_BYTES` of the body read and dropped)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from outbox_bridge.core import clock
from outbox_bridge.core.signatures import signature
from outbox_bridge.jobstore.webhook_deliveries import Attempted
from outbox_bridge.jobstore.webhooks import Delivery

if TYPE_CHECKING:
    import httpx

CONTENT_TYPE = "application/cloudevents+json"
SOURCE = "outbox-bridge"
TYPE_PREFIX = "outbox_bridge."
# Of an answer's body, at most this much is read (and dropped): enough to keep the connection reusable.
MAX_ANSWER_BYTES = 4096


def cloud_event(delivery: Delivery, view: dict[str, Any]) -> bytes:
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


def new_client(timeout: float, connections: int) -> httpx.Client:
    """The relay's one kept HTTP client: redirects are answers, not followed. httpx is imported here, on
    first use: a relay that sends no webhooks never loads it."""
    import httpx

    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.Client(follow_redirects=False, timeout=timeout, limits=limits, trust_env=False)


def post(client: httpx.Client, url: str, body: bytes, sent_headers: dict[str, str]) -> Attempted:
    """POST `body` to `url`; what the answer was (its status, or no answer and why) and how long it took."""
    import httpx

    at, started = clock.now(), time.monotonic()
    status: int | None = None
    error: str | None = None
    try:
        with client.stream("POST", url, content=body, headers=sent_headers) as answer:
            status = answer.status_code
            _drain(answer)
    except httpx.TimeoutException as exc:
        error = f"no answer in time ({type(exc).__name__})"
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if status is not None and not 200 <= status < 300:
        error = _refusal(status)
    latency_ms = (time.monotonic() - started) * 1000.0
    return Attempted(at=at, status_code=status, latency_ms=latency_ms, error=error)


def _drain(answer: httpx.Response) -> None:
    read = 0
    for chunk in answer.iter_raw():
        read += len(chunk)
        if read >= MAX_ANSWER_BYTES:
            return


def _refusal(status: int) -> str:
    if 300 <= status < 400:
        return f"HTTP {status}: a redirect, not followed (register the URL it points to)"
    return f"HTTP {status}"

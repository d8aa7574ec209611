"""outbox-bridge: durable jobs whose status you can defend.

The public Python API (what is not named here is internal):

- `kind(name, payload=Model)`: make a function a job kind; it runs with a `JobContext` and raises
  `PermanentError` (no retry) or `TransientError` (retried after a backoff) to fail.
- `enqueue(conn, kind, payload, key=..., tenant=..., owner=...)`: write a job in your own transaction.
- `Client(base_url, token=...)` and `AsyncClient`: the HTTP api (submit, get, list, cancel, wait, result).
- `Job`: a job as its view shows it. `InvalidJob`, `Conflict`, `StoreMismatch` and the client's errors
  (`ClientError` and a subclass per status).
"""

from outbox_bridge.client import AsyncClient, Client
from outbox_bridge.enqueuing import enqueue
from outbox_bridge.errors import (
    BadRequest,
    ClientError,
    Conflict,
    InvalidJob,
    NotFound,
    PayloadTooLarge,
    StoreMismatch,
    Unauthorized,
    Unavailable,
)
from outbox_bridge.handlers.base import JobContext, KindError, PermanentError, TransientError, kind
from outbox_bridge.job import Job

__all__ = [
    "AsyncClient",
    "BadRequest",
    "Client",
    "ClientError",
    "Conflict",
    "InvalidJob",
    "Job",
    "JobContext",
    "KindError",
    "NotFound",
    "PayloadTooLarge",
    "PermanentError",
    "StoreMismatch",
    "TransientError",
    "Unauthorized",
    "Unavailable",
    "enqueue",
    "kind",
]

"""outbox-bridge: durable jobs whose status you can defend.

The public Python API (what is not named here is internal):

- `kind(name, payload=Model)`: make a function a job kind; it runs with a `JobContext` and raises
  `PermanentError` (no retry) or `TransientError` (retried after a backoff) to fail, or `Snooze(seconds)`
  to run again later without spending an attempt.
- `enqueue(conn, kind, payload, key=..., tenant=..., owner=...)`: write a job in your own transaction (or
  `<kind function>.enqueue(conn, payload, ...)`), with `after=[ids]` one that runs after other jobs;
  `enqueue_many(conn, [JobSpec(...), ...], ...)`: up to 1,000; `enqueue_batch(conn, [JobSpec(...), ...],
  callback=JobSpec(...), key=..., ...)`: a batch whose callback runs once every one of its jobs has ended.
- `Client(base_url, token=...)` and `AsyncClient`: the HTTP api (submit, get, list, cancel, wait, result,
  submit_batch, get_batch).
- `schedule(name, kind=..., tenant=..., payload=..., cron=... | every=...)`: declare a schedule in a kinds
  module; the relay that leads adds it to the store, or brings the stored one in line with it.
- `__version__`: the installed version.
- `Job` and `Batch`: a job and a batch as their views show them. `InvalidJob` (and `UnknownDependencies`),
  `Conflict`, `StoreMismatch` and the client's errors (`ClientError` and a subclass per status).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from outbox_bridge.client.batch import Batch
from outbox_bridge.client.errors import (
    BadRequest,
    ClientError,
    Conflict,
    InvalidJob,
    NotFound,
    PayloadTooLarge,
    StoreMismatch,
    Unauthorized,
    Unavailable,
    UnknownDependencies,
)
from outbox_bridge.client.job import Job
from outbox_bridge.core.version import installed as _installed_version
from outbox_bridge.handlers.base import JobContext, KindError, PermanentError, Snooze, TransientError
from outbox_bridge.kind_functions import kind

if TYPE_CHECKING:
    from outbox_bridge.client.http import AsyncClient, Client
    from outbox_bridge.declared_schedules import schedule
    from outbox_bridge.enqueuing import JobSpec, enqueue, enqueue_batch, enqueue_many

# Imported on first use: they bring the api's modules (FastAPI) and httpx, which a worker process never needs
# (and `schedule`, the cron reading, which only a kinds module that declares a schedule needs).
_LAZY = {
    "enqueue": "outbox_bridge.enqueuing",
    "enqueue_many": "outbox_bridge.enqueuing",
    "enqueue_batch": "outbox_bridge.enqueuing",
    "JobSpec": "outbox_bridge.enqueuing",
    "Client": "outbox_bridge.client.http",
    "AsyncClient": "outbox_bridge.client.http",
    "schedule": "outbox_bridge.declared_schedules",
}


# The version pip installed (the distribution's metadata), as `outbox-bridge --version` prints it.
__version__ = _installed_version()


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'outbox_bridge' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "AsyncClient",
    "BadRequest",
    "Batch",
    "Client",
    "ClientError",
    "Conflict",
    "InvalidJob",
    "Job",
    "JobContext",
    "JobSpec",
    "KindError",
    "NotFound",
    "PayloadTooLarge",
    "PermanentError",
    "Snooze",
    "StoreMismatch",
    "TransientError",
    "Unauthorized",
    "Unavailable",
    "UnknownDependencies",
    "enqueue",
    "enqueue_batch",
    "enqueue_many",
    "kind",
    "schedule",
]

"""outbox-bridge: durable jobs whose status you can defend.

The public Python API (what is not named here is internal):

- `kind(name, payload=Model)`: make a function a job kind; it runs with a `JobContext` and raises
  `PermanentError` (no retry) or `TransientError` (retried after a backoff) to fail.
"""

from outbox_bridge.handlers.base import JobContext, KindError, PermanentError, TransientError, kind

__all__ = ["JobContext", "KindError", "PermanentError", "TransientError", "kind"]

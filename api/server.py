"""`outbox-bridge api`: serve the app with uvicorn. SIGTERM stops taking connections and lets requests in
flight finish (up to SHUTDOWN_GRACE_SECONDS). Connections are bounded (`api.connections`): a request head
must arrive in time, and each process holds at most HTTP_MAX_CONNECTIONS, of which at most
HTTP_MAX_CONNECTIONS_PER_CLIENT from one client."""

from __future__ import annotations

import functools
import math
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import uvicorn

from outbox_bridge.api.connections import BoundedProtocol, ConnectionBounds
from outbox_bridge.core.settings import Settings, environment_of


def serve(settings: Settings, *, host: str, port: int, workers: int = 1) -> None:
    """Serve until signalled. With `workers` > 1, each worker process builds its own app (and engine)
    from the environment, which is made to carry exactly `settings`."""
    options = {
        "host": host,
        "port": port,
        "log_config": None,  # keep the process's logging setup
        "access_log": False,  # requests are counted in /metrics; a log line each would cost throughput
        "timeout_graceful_shutdown": math.ceil(settings.shutdown_grace_seconds),
        # A class for uvicorn to call per connection; a partial of one pickles, for `--workers N`.
        "http": functools.partial(BoundedProtocol, bounds=ConnectionBounds.of(settings)),
    }
    with _exit_zero_after_sigterm():
        if workers == 1:
            from outbox_bridge.api.app import create_app

            uvicorn.run(create_app(settings, beat=True), **options)  # type: ignore[arg-type]
            return
        env = environment_of(settings, os.environ)  # what each worker process loads
        os.environ.clear()
        os.environ.update(env)
        uvicorn.run("outbox_bridge.api.app:create_app_from_env", factory=True, workers=workers, **options)  # type: ignore[arg-type]


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


@contextmanager
def _exit_zero_after_sigterm() -> Iterator[None]:
    """After its graceful shutdown, uvicorn re-raises the SIGTERM it caught, which would end the process as
    killed by the signal (143) although everything was stopped cleanly. The handler in place at that point,
    this one, turns it into a clean exit; it also covers a SIGTERM that arrives before uvicorn listens."""
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

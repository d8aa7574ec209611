"""A worker process's life, the same for both worker modes: check the store, start, wait for SIGTERM or
SIGINT, shut down (`worker.shutdown`), and exit with a code that says how it went."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from types import FrameType
from typing import Protocol

from sqlalchemy import Engine

from outbox_bridge.worker.readiness import store_ready

log = logging.getLogger(__name__)

EXIT_CLEAN, EXIT_LEFT_JOBS, EXIT_STORE_NOT_READY = 0, 1, 2
SIGNAL_POLL_SECONDS = 0.1


class StopSignals:
    """SIGTERM and SIGINT, counted. The handler only appends to a list: it may interrupt the main thread
    anywhere, even while that thread holds a lock, so it must not take one."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self._previous: dict[int, object] = {}

    def install(self) -> StopSignals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signal.Signals(signum).name)

    def wait(self) -> str:
        """Block until the first signal; returns its name. Sleeps in short steps, so it is always bounded."""
        while not self.received:
            time.sleep(SIGNAL_POLL_SECONDS)
        return self.received[0]

    def urgent(self) -> bool:
        """A second signal arrived: stop waiting for running jobs."""
        return len(self.received) > 1


class Stoppable(Protocol):
    def shutdown(self, urgent: Callable[[], bool]) -> int:
        """Stop, and return the exit code."""


def run_until_signalled(engine: Engine, start: Callable[[], Stoppable]) -> int:
    """Start the process (`start()`) once the store is ready, run it until SIGTERM or SIGINT, shut it down
    (a second signal cuts the waiting short) and dispose of `engine`. Returns the exit code: `EXIT_CLEAN`,
    `EXIT_LEFT_JOBS` when a job was still running at exit, `EXIT_STORE_NOT_READY` when the store is not
    reachable or not at the code's schema revision."""
    signals = StopSignals().install()
    try:
        if not store_ready(engine):
            return EXIT_STORE_NOT_READY
        process = start()
        log.info("%s received", signals.wait())
        return process.shutdown(signals.urgent)
    finally:
        signals.restore()
        engine.dispose()

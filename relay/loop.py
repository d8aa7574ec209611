"""The relay's event loop and what hangs off it: named timers, and store work run on a few threads whose
results come back to the loop (pika, like everything that touches the relay's state, runs on the loop's
thread only). The relay's services share one `RelayLoop`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

from pika.adapters.select_connection import IOLoop

log = logging.getLogger("relay")

STORE_THREADS = 3


class RelayLoop:
    """An IOLoop, its timers and its store threads. `after_store` runs on the loop after every store call,
    once its result was handled.

    `stopping` says the relay is shutting down: its services take no new work. `stopped` says the loop was
    told to stop: timers set with `every` are not renewed."""

    def __init__(self, after_store: Callable[[], None]) -> None:
        self.ioloop = IOLoop()
        self.busy: set[str] = set()  # store work running, by name
        self.stopping = False
        self.stopped = False
        self._store = ThreadPoolExecutor(max_workers=STORE_THREADS, thread_name_prefix="relay-store")
        self._timers: dict[str, Any] = {}
        self._store_failures = 0  # store calls that failed in a row
        self._after_store = after_store

    def stop(self) -> None:
        """Stop the loop (`start` of the IOLoop returns)."""
        self.stopped = True
        self.ioloop.stop()

    def close(self) -> None:
        """Once the loop has ended: wait for the store work still running, then close the IOLoop."""
        self._store.shutdown(wait=True)
        self.ioloop.close()

    # -- timers --------------------------------------------------------------------------------------------

    def every(self, interval: float, action: Callable[[], None]) -> None:
        """Run `action` every `interval` seconds, the first time `interval` from now, until the loop stops."""

        def tick() -> None:
            action()
            if not self.stopped:
                self.ioloop.call_later(interval, tick)

        self.ioloop.call_later(interval, tick)

    def later(self, name: str, delay: float, action: Callable[[], None]) -> None:
        """One pending timer per name; a second request while one is pending is dropped."""
        if name in self._timers:
            return

        def fire() -> None:
            self._timers.pop(name, None)
            action()

        self._timers[name] = self.ioloop.call_later(delay, fire)

    def cancel(self, name: str) -> None:
        timer = self._timers.pop(name, None)
        if timer is not None:
            self.ioloop.remove_timeout(timer)

    # -- store threads -------------------------------------------------------------------------------------

    def in_store(
        self,
        name: str,
        work: Callable[[], Any],
        *,
        then: Callable[[Any], None],
        on_error: Callable[[], None] | None = None,
    ) -> None:
        """Run `work` on a store thread; `then(result)` (or `on_error()`) runs back on the loop."""
        self.busy.add(name)
        future = self._store.submit(work)

        def back_on_loop(done: Future[Any]) -> None:
            self.ioloop.add_callback_threadsafe(partial(self._store_done, name, done, then, on_error))

        future.add_done_callback(back_on_loop)

    def store_succeeded(self) -> None:
        """A store call succeeded (on the loop's own thread): a run of failures ends."""
        self._store_failures = 0

    def store_failed(self, name: str, error: BaseException) -> None:
        """Count a failed store call (a run of them logs its first three, then every tenth)."""
        self._store_failures += 1
        if self._store_failures <= 3 or self._store_failures % 10 == 0:
            log.warning("store %s failed (%d in a row): %s", name, self._store_failures, error)

    def _store_done(
        self,
        name: str,
        done: Future[Any],
        then: Callable[[Any], None],
        on_error: Callable[[], None] | None,
    ) -> None:
        self.busy.discard(name)
        error = done.exception()
        if error is None:
            self.store_succeeded()
            then(done.result())
        else:
            self.store_failed(name, error)
            if on_error is not None:
                on_error()
        self._after_store()

"""An attempt's time limit, its kind's `timeout_seconds`: an attempt still running past it ends as a failed
attempt with code `timeout` (retried within the budget), and its thread is free for other work.

An `async def` kind's coroutine is cancelled at the limit (`asyncio.timeout`). A function cannot be stopped
from outside its thread, so the process's one watchdog thread raises `AttemptTimedOut` in the thread running
it, as Dramatiq's time limit does (`PyThreadState_SetAsyncExc`): a `BaseException`, so that a kind's
`except Exception` does not swallow it. The interpreter raises it in that thread between two of its
bytecodes, so a kind blocked in one long call into C (a single `time.sleep(600)`, a socket read with no
timeout of its own) meets it only once that call returns.

The watchdog raises only for a limit still armed, under the lock that disarming takes; disarming a limit
that fired takes back the exception if the thread has not met it yet. So once an attempt's limit is disarmed,
nothing the watchdog did can reach whatever its thread runs next. Nor does it reach the thread inside the
context's store writes (`shielded`), which an exception at any bytecode could leave half done (a lock
taken and never released): a limit that comes due there is raised as the write ends."""

from __future__ import annotations

import asyncio
import ctypes
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

# The error code of an attempt that ran past its kind's `timeout_seconds`.
TIMEOUT = "timeout"


class AttemptTimedOut(BaseException):
    """Raised in an attempt (its thread, or its coroutine) that ran past its kind's `timeout_seconds`."""


@dataclass(eq=False)
class _Armed:
    """A limit being watched: the thread it interrupts and when (`time.monotonic`)."""

    thread: int
    due: float
    fired: bool = False
    shields: int = 0  # the thread is in this many `shielded` blocks
    held_off: bool = False  # it came due in one: raised as the last of them ends


def _raise_in(thread: int, exc: type[BaseException] | None) -> None:
    """Have `thread` raise `exc` at its next bytecode; None takes back one not raised yet."""
    raised = None if exc is None else ctypes.py_object(exc)  # None passes NULL
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), raised)


class Watchdog:
    """The thread that interrupts function kinds past their limit (one per process, started on first use)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._armed: set[_Armed] = set()
        self._thread: threading.Thread | None = None

    def arm(self, due: float) -> _Armed:
        """Watch the calling thread until `disarm`: at `due` (`time.monotonic`) it raises
        `AttemptTimedOut`."""
        armed = _Armed(threading.get_ident(), due)
        with self._lock:
            self._armed.add(armed)
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="attempt-watchdog", daemon=True)
                self._thread.start()
            self._changed.notify()
        return armed

    def disarm(self, armed: _Armed) -> bool:
        """Stop watching; whether the limit fired (its exception, if the thread has not met it yet, is
        taken back)."""
        with self._lock:
            self._armed.discard(armed)
            if armed.fired:
                _raise_in(armed.thread, None)
            return armed.fired

    @contextmanager
    def shielded(self, armed: _Armed | None) -> Iterator[None]:
        """Keep the interruption of `armed` (None: none) off the calling thread for the block; one that
        comes due meanwhile is raised as the block ends. `AttemptTimedOut` at once, and the block does not
        run, if it fired already."""
        if armed is None or armed.thread != threading.get_ident():
            yield
            return
        with self._lock:
            if armed.fired:
                _raise_in(armed.thread, None)
                raise AttemptTimedOut
            armed.shields += 1
        try:
            yield
        finally:
            with self._lock:
                armed.shields -= 1
                armed.fired = armed.held_off and not armed.shields
            if armed.fired:
                raise AttemptTimedOut

    def _watch(self) -> None:
        with self._lock:
            while True:
                now = time.monotonic()
                for armed in [a for a in self._armed if a.due <= now]:
                    self._armed.discard(armed)
                    if armed.shields:
                        armed.held_off = True
                        continue
                    armed.fired = True
                    _raise_in(armed.thread, AttemptTimedOut)
                next_due = min((a.due for a in self._armed), default=None)
                self._changed.wait(None if next_due is None else next_due - now)


WATCHDOG = Watchdog()


@dataclass
class TimeLimit:
    """One attempt's limit: `seconds` from when it is made."""

    seconds: float
    due: float = field(init=False)
    _armed: _Armed | None = field(default=None, init=False, repr=False)  # while `call` runs

    def __post_init__(self) -> None:
        self.due = time.monotonic() + self.seconds

    def remaining(self) -> float:
        return self.due - time.monotonic()

    def call(self, fn: Callable[[], T]) -> T:
        """`fn()` in this thread, interrupted at the limit. `AttemptTimedOut` when the limit fired while it
        ran, even if `fn` caught the interruption and returned."""
        armed = self._armed = WATCHDOG.arm(self.due)
        try:
            returned = fn()
        finally:
            self._armed = None
            if WATCHDOG.disarm(armed):
                raise AttemptTimedOut
        return returned

    def shielded(self) -> AbstractContextManager[None]:
        """A block of `call`'s function the interruption does not cut into (`Watchdog.shielded`)."""
        return WATCHDOG.shielded(self._armed)

    async def bounded(self, coroutine: Awaitable[T]) -> T:
        """Await `coroutine`, cancelled at the limit. `AttemptTimedOut` when the limit passed while it ran,
        even if it caught the cancellation and returned."""
        timeout = asyncio.timeout(max(self.remaining(), 0.0))
        try:
            async with timeout:
                returned = await coroutine
        except TimeoutError:
            if timeout.expired():
                raise AttemptTimedOut from None
            raise
        if timeout.expired():
            raise AttemptTimedOut
        return returned


def shielded(limit: TimeLimit | None) -> AbstractContextManager[None]:
    """`limit.shielded()`, or nothing to hold off without a limit."""
    return nullcontext() if limit is None else limit.shielded()

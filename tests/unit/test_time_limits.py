"""An attempt's time limit (`worker.timeouts`): a function past it is interrupted in its own thread, even one
that catches `Exception`, but never inside a shielded block (the context's store writes); a coroutine past it
is cancelled; and the interruption never reaches the thread once the limit is disarmed, whatever the thread
runs next."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from outbox_bridge.worker.timeouts import AttemptTimedOut, TimeLimit


def in_thread(fn: Callable[[], Any]) -> Any:
    """What `fn()` returns or raises (as the exception object), run in a thread of its own."""
    got: list[Any] = []

    def run() -> None:
        try:
            got.append(fn())
        except BaseException as exc:
            got.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the limit did not stop the function"
    return got[0]


def busy(seconds: float) -> str:
    """Python code running `seconds` (in short sleeps, between which the interpreter can interrupt it)."""
    until = time.monotonic() + seconds
    while (left := until - time.monotonic()) > 0:
        time.sleep(min(left, 0.005))
    return "done"


def test_a_function_past_its_limit_is_interrupted_in_its_thread() -> None:
    def limited() -> Any:
        return TimeLimit(0.2).call(lambda: busy(30))

    assert isinstance(in_thread(limited), AttemptTimedOut)


def test_a_function_that_catches_exception_is_interrupted_all_the_same() -> None:
    def swallowing() -> str:
        try:
            return busy(30)
        except Exception:
            return "swallowed"

    assert isinstance(in_thread(lambda: TimeLimit(0.2).call(swallowing)), AttemptTimedOut)


def test_a_function_that_catches_the_interruption_still_timed_out() -> None:
    def stubborn() -> str:
        try:
            return busy(30)
        except BaseException:
            return "kept going"

    assert isinstance(in_thread(lambda: TimeLimit(0.2).call(stubborn)), AttemptTimedOut)


def test_a_function_within_its_limit_returns_and_nothing_fires_later() -> None:
    def within() -> str:
        returned = TimeLimit(0.3).call(lambda: "quick")
        busy(0.6)  # past where the limit was due: the thread runs on undisturbed
        return returned

    assert in_thread(within) == "quick"


def test_the_interruption_never_reaches_what_the_thread_runs_after_the_attempt() -> None:
    """Limits that come due at about the moment their function returns: however the race goes, the
    attempt is either timed out inside `call` or not at all, and the thread's next work (running past
    where the limit was due) is never hit."""

    def attempts() -> list[str]:
        seen = []
        for n in range(200):
            try:  # returning a little before, about at or a little after the limit
                seen.append(TimeLimit(0.004).call(partial(busy, 0.002 + 0.001 * (n % 5))))
            except AttemptTimedOut:
                seen.append("timed out")
            busy(0.01)  # the thread's next work, outside any limit
        return seen

    seen = in_thread(attempts)
    assert isinstance(seen, list), f"the interruption escaped an attempt: {seen!r}"
    assert set(seen) <= {"done", "timed out"} and len(seen) == 200


def test_a_shielded_block_is_never_cut_short_the_limit_is_raised_as_it_ends() -> None:
    done: list[str] = []

    def writes() -> None:
        with limit.shielded():  # a store write of the context
            busy(0.5)
            done.append("written")
        done.append("went on")

    limit = TimeLimit(0.1)
    assert isinstance(in_thread(lambda: limit.call(writes)), AttemptTimedOut)
    assert done == ["written"]


def test_a_shielded_block_within_the_limit_changes_nothing() -> None:
    limit = TimeLimit(5)

    def writes() -> str:
        with limit.shielded():
            busy(0.05)
        return "returned"

    assert in_thread(lambda: limit.call(writes)) == "returned"


def test_a_coroutine_past_its_limit_is_cancelled() -> None:
    async def slow() -> str:
        await asyncio.sleep(30)
        return "done"

    with pytest.raises(AttemptTimedOut):
        asyncio.run(TimeLimit(0.2).bounded(slow()))


def test_a_coroutine_that_catches_its_cancellation_still_timed_out() -> None:
    async def stubborn() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "kept going"
        return "done"

    with pytest.raises(AttemptTimedOut):
        asyncio.run(TimeLimit(0.2).bounded(stubborn()))


def test_a_coroutines_own_timeout_error_is_its_own() -> None:
    async def upstream() -> str:
        raise TimeoutError("the upstream service")

    with pytest.raises(TimeoutError, match="upstream"):
        asyncio.run(TimeLimit(10).bounded(upstream()))


def test_the_remaining_time_counts_down_from_the_limit() -> None:
    limit = TimeLimit(60)
    assert 0 < limit.remaining() <= 60

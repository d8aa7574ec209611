"""The contract of the relay's chores (`relay.services.PeriodicService`): at each tick a chore hands its work
to a store thread, unless its last run is still going, the relay is stopping, or it is not wanted now (a
leader's chore on a standby); what the work returns goes to `done`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from outbox_bridge.relay.loop import RelayLoop
from outbox_bridge.relay.services import PeriodicService


class FakeLoop:
    """Runs store work at once, on the caller's thread, and keeps the timers it is given."""

    def __init__(self) -> None:
        self.busy: set[str] = set()
        self.stopping = False
        self.timers: list[tuple[float, Callable[[], None]]] = []

    def every(self, interval: float, action: Callable[[], None]) -> None:
        self.timers.append((interval, action))

    def in_store(self, name: str, work: Callable[[], Any], *, then: Callable[[Any], None]) -> None:
        then(work())


class Chore(PeriodicService[int]):
    name = "chore"

    def __init__(self, loop: FakeLoop, wanted: bool = True) -> None:
        super().__init__(cast(RelayLoop, loop), 2.5)
        self.runs = 0
        self.results: list[int] = []
        self._wanted = wanted

    def wanted(self) -> bool:
        return self._wanted

    def work(self) -> int:
        self.runs += 1
        return self.runs

    def done(self, result: int) -> None:
        self.results.append(result)


def test_a_started_chore_ticks_at_its_interval_and_hands_its_result_to_done() -> None:
    loop = FakeLoop()
    chore = Chore(loop)
    chore.start()
    [(interval, tick)] = loop.timers
    assert interval == 2.5
    tick()
    tick()
    assert chore.results == [1, 2]


def test_a_chore_does_not_start_again_while_its_last_run_is_going() -> None:
    loop = FakeLoop()
    chore = Chore(loop)
    loop.busy.add("chore")
    chore.tick()
    assert chore.runs == 0


def test_a_chore_takes_no_new_work_while_the_relay_stops() -> None:
    loop = FakeLoop()
    chore = Chore(loop)
    loop.stopping = True
    chore.tick()
    assert chore.runs == 0


def test_a_chore_that_is_not_wanted_now_does_not_run() -> None:
    loop = FakeLoop()
    chore = Chore(loop, wanted=False)
    chore.tick()
    assert chore.runs == 0

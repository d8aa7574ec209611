"""The contract every relay service keeps, and the base of the chores that run on a timer.

A relay (`relay.relay.Relay`) owns the event loop, the leader role and the shutdown, and runs its services:
the publisher (`relay.publisher`), the rescuer (`relay.housekeeping`), the pruner (`relay.retention`), the
scheduler (`relay.schedules`), the dead-letter reconciler (`relay.deadletters`) and the webhook sender
(`relay.webhook_sender`). Each is started once and stopped once:

- `start()` runs on the loop's thread before the loop runs, and sets the service's timers or threads going;
- while the relay shuts down, `RelayLoop.stopping` is set: a service takes no new work;
- `stop()` runs once the loop has ended, and lets go of what the service holds. After a forced shutdown
  the service's store work may still be running on a store thread: `stop` must not race it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Generic, Protocol, TypeVar

from outbox_bridge.relay.loop import RelayLoop

T = TypeVar("T")


class Service(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


class PeriodicService(ABC, Generic[T]):
    """A chore on the loop: every `interval` seconds `work()` runs on a store thread and `done(result)` back
    on the loop; unless its last run is still going, the relay is stopping, or `wanted()` says no (a chore
    for the leader alone, or one that needs the broker). A run that fails is counted and logged by the loop
    under the chore's `name`."""

    name: ClassVar[str]

    def __init__(self, loop: RelayLoop, interval: float) -> None:
        self._loop = loop
        self._interval = interval

    def start(self) -> None:
        self._loop.every(self._interval, self.tick)

    def stop(self) -> None:
        """Nothing to let go of unless a chore says otherwise."""

    def tick(self) -> None:
        if self.name not in self._loop.busy and not self._loop.stopping and self.wanted():
            self._loop.in_store(self.name, self.work, then=self.done)

    def wanted(self) -> bool:
        """Whether to run now (asked on the loop at each tick)."""
        return True

    @abstractmethod
    def work(self) -> T:
        """One run, on a store thread."""

    @abstractmethod
    def done(self, result: T) -> None:
        """What the run did, back on the loop (usually: logged)."""

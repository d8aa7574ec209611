"""What a worker mode plugs into the worker both modes share (`worker.writer`): where its broker deliveries
are settled (`Acker`: the consumer's broker link; `NoDeliveries` for the baseline, which has none) and when
it claims due jobs from the jobs table (`TableSource`: the consumer's degraded mode, `consumer.degraded`;
the baseline's polling, `baseline.pacing`). The two modes differ in these and in nothing else."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Acker(Protocol):
    """Where deliveries are settled (the consumer's broker link, which takes back its own deliveries)."""

    def ack(self, deliveries: Sequence[Any]) -> int: ...

    def requeue(self, deliveries: Sequence[Any]) -> int: ...

    def reject(self, deliveries: Sequence[Any]) -> int: ...


class NoDeliveries:
    """The `Acker` of a process whose jobs all come from the table: there is never a delivery to settle."""

    def ack(self, deliveries: Sequence[Any]) -> int:
        return 0

    requeue = reject = ack


class TableSource(Protocol):
    """When a process claims due jobs from the jobs table, and how often it looks."""

    @property
    def active(self) -> bool:
        """Whether the last `check` said to claim from the table."""
        ...

    @property
    def reads_first(self) -> bool:
        """Whether a round that only looks at the table (woken by its pause, with nothing else to write)
        first reads whether any job is due, and takes the write lock only if one is."""
        ...

    def check(self) -> bool:
        """Whether the next round claims from the table."""
        ...

    def took(self, count: int, room: int) -> None:
        """A round that claimed from the table with `room` claimed `count` jobs there."""
        ...

    def wait_seconds(self) -> float | None:
        """How long the writer may wait for other work before it looks at the table again (None: it need
        not look until something else wakes it)."""
        ...

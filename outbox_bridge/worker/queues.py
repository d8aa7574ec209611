"""Which named queues a consumer or baseline worker runs, on which threads: `--queues fast,slow=2`.

A queue given `=N` gets a pool of N threads of its own; the queues named without a number share one pool of
`--concurrency` threads. Without `--queues`, one pool of `--concurrency` threads runs every queue of the
kinds the process loaded (`default` among them), and its claims in the store take a job of any queue. A
pool's threads run only its queues' jobs, so a burst on one queue cannot take the threads of another."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from outbox_bridge.core.queue_names import DEFAULT_QUEUE, QUEUE_RULE, is_queue_name
from outbox_bridge.handlers.base import KINDS


class QueuesError(ValueError):
    """`--queues` names a queue wrongly or twice, or gives one a number of threads that is not a whole number
    above 0."""


@dataclass(frozen=True)
class Pool:
    """Threads of a worker process that run the jobs of these named queues, and no others."""

    queues: tuple[str, ...]
    threads: int
    # Started without `--queues`: its claims in the store take a job of any queue, with no filter to pay for
    # on every row a claim walks (and a job left on a queue its kind no longer names still runs).
    every: bool = False

    @property
    def claimed(self) -> tuple[str, ...] | None:
        """The queues its claims in the store filter on; None: every queue."""
        return None if self.every else self.queues

    def __str__(self) -> str:
        return f"{','.join(self.queues)}={self.threads}"


def loaded() -> list[str]:
    """The named queues of the kinds this process loaded, `default` always among them, sorted."""
    return sorted({DEFAULT_QUEUE, *(kind.policy.queue for kind in KINDS.values())})


def pools(spec: str | None, concurrency: int) -> list[Pool]:
    """The pools `--queues spec` asks for (every `loaded()` queue on `concurrency` threads when it names
    none): the queues named without a number on one pool of `concurrency` threads, then each queue with a
    number on a pool of its own. `QueuesError` says what is wrong with `spec`."""
    if spec is None:
        return [Pool(tuple(loaded()), concurrency, every=True)]
    shared: list[str] = []
    own: list[Pool] = []
    for item in spec.split(","):
        name, numbered, number = (part.strip() for part in item.partition("="))
        if not is_queue_name(name):
            raise QueuesError(f"--queues: {name!r} is not a queue name ({QUEUE_RULE})")
        if name in shared or any(name in pool.queues for pool in own):
            raise QueuesError(f"--queues: queue {name!r} is named twice")
        if not numbered:
            shared.append(name)
        elif number.isascii() and number.isdigit() and int(number) > 0:
            own.append(Pool((name,), int(number)))
        else:
            raise QueuesError(
                f"--queues: {item.strip()!r}: the number of threads must be a whole number above 0"
            )
    return ([Pool(tuple(shared), concurrency)] if shared else []) + own


def threads(of: Iterable[Pool]) -> int:
    """Every thread of the pools."""
    return sum(pool.threads for pool in of)

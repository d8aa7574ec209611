"""The dead-letter check: messages in `jobs.dead` are settled from the store within seconds.

RabbitMQ dead-letters a message of the `jobs` queue once it has been returned `x-delivery-limit` times
(consumers that crashed or stopped while holding it), or when a consumer rejects it. The message only said
"job X needs attention"; the store says whether X still does. So every `DEAD_LETTER_CHECK_SECONDS` a relay
takes what waits in `jobs.dead` and, in one store transaction, announces again each job that is still
queued and has no delivery waiting to be published (a new outbox row, due when the job is); every other
message (its job is running, finished, already announced again, or unknown) needs nothing and is dropped.
Only then are those messages acked. Undecodable messages stay parked in `jobs.dead`, counted, for an
operator to look at: that, and nothing else, is what `jobs.dead` holds.

The check has a broker connection of its own (a `BlockingConnection` used by one store thread at a time),
so the relay's publishing loop never waits on it. `DeadLetterReconciler` is the relay's service that runs it,
on every relay whose publishing connection is up, the leader and the standbys alike.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pika
from sqlalchemy import Engine

from outbox_bridge.broker import topology
from outbox_bridge.broker.connection import BROKER_ERRORS, broker_addresses, connect_first
from outbox_bridge.broker.message import JobMessage, UndecodableMessage
from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, sweeper
from outbox_bridge.relay.loop import RelayLoop
from outbox_bridge.relay.services import PeriodicService

log = logging.getLogger("relay")

BATCH = 500  # messages looked at per check, at most
CONNECT_TIMEOUT_SECONDS = 5.0


@dataclass
class Checked:
    """What one check did with the messages it took from `jobs.dead`."""

    outcomes: Counter[str] = field(default_factory=Counter)  # by `sweeper.DeadLetterOutcome` value
    parked: int = 0  # undecodable: left in jobs.dead
    left: int = 0  # in jobs.dead when the check began, less what it settled (parked ones included)

    def line(self) -> str | None:
        if not self.outcomes and not self.parked:
            return None
        settled = ", ".join(f"{n} {outcome}" for outcome, n in sorted(self.outcomes.items()))
        parked = f"; {self.parked} undecodable left parked" if self.parked else ""
        return f"dead-lettered messages settled from the store: {settled or 'none'}{parked}; {self.left} left"


class DeadLetterCheck:
    """Settles what waits in `settings.dead_letter_queue`. Not thread-safe: one check at a time."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        self._settings = settings
        self._engine = engine
        self._connection: pika.BlockingConnection | None = None
        self._channel: Any = None

    def check(self) -> Checked:
        """Take up to `BATCH` messages, settle them from the store, ack the settled ones and give back the
        undecodable ones. Raises when the broker or the store fails; nothing taken is lost then (unacked
        messages go back to `jobs.dead` when the channel closes)."""
        try:
            return self._check(self._open_channel())
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and connection.is_open:
            with contextlib.suppress(*BROKER_ERRORS):
                connection.close()

    def _open_channel(self) -> Any:
        if self._channel is None or not self._channel.is_open:
            self.close()
            nodes = broker_addresses(
                self._settings.rabbitmq_url, name="dead-letter check", timeout=CONNECT_TIMEOUT_SECONDS
            )
            self._connection, _node = connect_first(nodes)
            self._channel = self._connection.channel()
            topology.declare(self._channel, self._settings)
        return self._channel

    def _check(self, channel: Any) -> Checked:
        taken, held = take(channel, self._settings.dead_letter_queue, BATCH)
        if not taken:
            return Checked()
        jobs: dict[int, str] = {}
        undecodable: list[int] = []
        for tag, body in taken:
            try:
                jobs[tag] = JobMessage.decode(body).job_id
            except UndecodableMessage:
                undecodable.append(tag)
        outcomes = {}
        if jobs:
            now = clock.now()
            outcomes = db.transact(self._engine, sweeper.settle_dead_letters, sorted(set(jobs.values())), now)
        for tag in jobs:
            channel.basic_ack(tag)
        for tag in undecodable:
            channel.basic_nack(tag, requeue=True)
        counted = Counter(outcomes[job_id].value for job_id in jobs.values())
        return Checked(counted, len(undecodable), held - len(jobs))


def take(channel: Any, queue: str, limit: int) -> tuple[list[tuple[int, bytes]], int]:
    """Up to `limit` messages from `queue`, unacked, as (delivery tag, body), and how many the queue held
    when the first came. Never more than that (a message given back meanwhile is not taken twice)."""
    taken: list[tuple[int, bytes]] = []
    held = 0
    while len(taken) < min(limit, held or limit):
        method, _properties, body = channel.basic_get(queue, auto_ack=False)
        if method is None:
            break
        held = held or method.message_count + 1
        taken.append((method.delivery_tag, body))
    return taken, held


class DeadLetterReconciler(PeriodicService[Checked | None]):
    """A `DeadLetterCheck` every `dead_letter_check_seconds` while `connected()` (the relay's publishing
    connection is up: the broker is reachable). A broker failure is logged here and the store's by the
    loop; what a check settled is logged."""

    name = "dead letters"

    def __init__(
        self, settings: Settings, engine: Engine, loop: RelayLoop, connected: Callable[[], bool]
    ) -> None:
        super().__init__(loop, settings.dead_letter_check_seconds)
        self._check = DeadLetterCheck(settings, engine)
        self._connected = connected
        # A check runs on a store thread; `stop` closes its connection on another: one at a time.
        self._lock = threading.Lock()

    def wanted(self) -> bool:
        return self._connected()

    def work(self) -> Checked | None:
        with self._lock:
            try:
                return self._check.check()
            except BROKER_ERRORS as exc:
                log.warning("dead-letter check: broker connection failed: %r", exc)
                return None

    def done(self, result: Checked | None) -> None:
        line = result.line() if result is not None else None
        if line is not None:
            log.info("%s", line)

    def stop(self) -> None:
        """Close the check's connection (once a check still running has ended)."""
        with self._lock:
            self._check.close()

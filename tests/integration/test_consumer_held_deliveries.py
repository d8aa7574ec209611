"""A consumer's store writer settles the deliveries its broker link says it has held past
`CONSUMER_DELIVERY_HOLD_SECONDS` (`StoreWriter.held_past`), the store's way and never by giving them back to
the queue: a claimed job's delivery is acked while the job runs on under its lease, and a delivery still
waiting for a thread is acked once its job has a new outbox row, so the relay delivers it again."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, select, update

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.schema import outbox
from outbox_bridge.jobstore.states import State
from outbox_bridge.worker.lease import LeaseKeeper
from outbox_bridge.worker.writer import StoreWriter
from tests.support.procs import wait_for
from tests.support.store import job_row, new_jobs


@dataclass(frozen=True)
class Delivered:
    job_id: str
    tag: int
    generation: int = 1
    priority: int = 1
    tenant: str = "acme"
    traceparent: str | None = None


class Acks:
    """The writer's `Acker`: what it acked (with each job's state at that moment), requeued, rejected."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.acked: list[tuple[int, State]] = []
        self.returned: list[Any] = []
        self._lock = threading.Lock()

    def ack(self, deliveries: Sequence[Any]) -> int:
        seen = [(d.tag, job_row(self.engine, d.job_id).state) for d in deliveries]
        with self._lock:
            self.acked += seen
        return len(deliveries)

    def requeue(self, deliveries: Sequence[Any]) -> int:
        self.returned += deliveries
        return len(deliveries)

    reject = requeue

    def tags(self) -> list[int]:
        with self._lock:
            return [tag for tag, _ in self.acked]


def publish_all(conn: Connection) -> None:
    """Mark every outbox row published, as the relay would have."""
    conn.execute(update(outbox).values(published_at=clock.now()))


def unpublished(engine: Engine) -> list[str]:
    query = select(outbox.c.job_id).where(outbox.c.published_at.is_(None))
    return db.read(engine, lambda conn: list(conn.execute(query).scalars()))


@pytest.fixture
def writer(engine: Engine, settings_factory: Callable[..., Settings]) -> Iterator[tuple[StoreWriter, Acks]]:
    settings = settings_factory()
    keeper = LeaseKeeper(engine, settings).start()
    acks = Acks(engine)
    made = StoreWriter(
        engine, settings, keeper, concurrency=1, worker="held-writer", role="consumer", acker=acks
    ).start()
    yield made, acks
    made.close()
    keeper.stop()


def test_held_deliveries_are_acked_early_and_the_waiting_ones_jobs_announced_again(
    engine: Engine, writer: tuple[StoreWriter, Acks]
) -> None:
    store_writer, acks = writer
    [slow] = new_jobs(engine, kind="sleep", payload={"seconds": 1.0})
    behind = new_jobs(engine, 2, kind="noop")
    db.transact(engine, publish_all)
    store_writer.offer(Delivered(slow, 1))
    wait_for(lambda: job_row(engine, slow).state is State.RUNNING, 10, what="the slow job claimed")
    store_writer.offer(Delivered(behind[0], 2))
    store_writer.offer(Delivered(behind[1], 3))

    store_writer.held_past(1, 2)  # the link: tags 1 and 2 of connection 1 were held too long
    wait_for(lambda: sorted(acks.tags()) == [1, 2], 10, what="both held deliveries acked")
    assert sorted(acks.acked) == [(1, State.RUNNING), (2, State.QUEUED)]
    assert unpublished(engine) == [behind[0]], "the waiting job got a new outbox row, the others none"

    wait_for(lambda: job_row(engine, behind[1]).state is State.SUCCEEDED, 10, what="the job behind ran")
    assert job_row(engine, slow).state is State.SUCCEEDED
    assert job_row(engine, behind[0]).state is State.QUEUED, "its new outbox row delivers it again"
    assert acks.returned == [], "nothing went back to the queue"
    assert store_writer.counts["acked_early"] == 1 and store_writer.counts["announced_again"] == 1


def test_a_delivery_of_another_connection_or_a_later_tag_is_left_alone(
    engine: Engine, writer: tuple[StoreWriter, Acks]
) -> None:
    store_writer, acks = writer
    [slow] = new_jobs(engine, kind="sleep", payload={"seconds": 0.5})
    db.transact(engine, publish_all)
    store_writer.offer(Delivered(slow, 5))
    wait_for(lambda: job_row(engine, slow).state is State.RUNNING, 10, what="the slow job claimed")
    store_writer.held_past(1, 4)
    store_writer.held_past(2, 9)
    wait_for(lambda: job_row(engine, slow).state is State.SUCCEEDED, 10, what="the job finished")
    wait_for(lambda: acks.tags() == [5], 10, what="the ack its outcome sends")
    assert store_writer.counts["acked_early"] == 0

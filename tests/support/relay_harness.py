"""What the relay tests share: seed outbox rows, read them back, run a relay (or a consumer) in this process,
and look at (then remove) the broker objects a test declared."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from typing import Any

import pika
from sqlalchemy import Connection, Engine, func, insert, select, update

from outbox_bridge.broker import topology
from outbox_bridge.broker.message import JobMessage
from outbox_bridge.consumer.main import Consumer
from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, intake
from outbox_bridge.jobstore.schema import jobs, outbox
from outbox_bridge.jobstore.states import State
from outbox_bridge.relay.relay import WRITE_BACK_GRACE_SECONDS, Relay


def _insert_jobs(conn: Connection, count: int, spread_seconds: float) -> list[str]:
    now = clock.now()
    ids = [intake.new_id() for _ in range(count)]
    conn.execute(
        insert(jobs),
        [
            {
                "id": job_id,
                "tenant": "relay-tests",
                "owner": "tester",
                "operation_key": f"op-{job_id}",
                "fingerprint": intake.fingerprint("noop", {}),
                "kind": "noop",
                "payload": "{}",
                "state": State.QUEUED.value,
                "epoch": 0,
                "attempts": 0,
                "max_attempts": 3,
                "available_at": now,
                "cancel_requested": False,
                "created_at": now,
                "updated_at": now,
            }
            for job_id in ids
        ],
    )
    # Row n comes due n/count of the way through the spread, so a relay meets them while it runs.
    due = [now + spread_seconds * (n + 1) / count if spread_seconds else now for n in range(count)]
    conn.execute(
        insert(outbox),
        [
            {"job_id": job_id, "created_at": now, "available_at": at, "publish_attempts": 0}
            for job_id, at in zip(ids, due, strict=True)
        ],
    )
    return ids


def seed_jobs(engine: Engine, count: int, *, spread_seconds: float = 0.0) -> list[str]:
    """Write `count` queued noop jobs and their outbox rows in one transaction (as `accept` would, in
    bulk); returns the job ids. With `spread_seconds`, the rows come due one after another over that time."""
    return db.transact(engine, _insert_jobs, count, spread_seconds)


def delay_outbox(engine: Engine, due_at: float) -> None:
    """Make every unpublished row come due at `due_at`."""
    db.transact(
        engine,
        lambda conn: conn.execute(
            update(outbox).where(outbox.c.published_at.is_(None)).values(available_at=due_at)
        ),
    )


@dataclass(frozen=True)
class Row:
    id: int
    job_id: str
    published_at: float | None
    available_at: float
    publish_attempts: int


def outbox_rows(engine: Engine) -> list[Row]:
    def fetch(conn: Connection) -> list[Row]:
        result = conn.execute(select(outbox).order_by(outbox.c.id)).mappings()
        return [
            Row(
                r["id"],
                r["job_id"],
                r["published_at"],
                r["available_at"],
                r["publish_attempts"],
            )
            for r in result
        ]

    return db.read(engine, fetch)


def _count_unpublished(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).where(outbox.c.published_at.is_(None))).scalar_one())


def unpublished(engine: Engine) -> int:
    """Outbox rows not yet marked published."""
    return db.read(engine, _count_unpublished)


@dataclass(frozen=True)
class Delivered:
    message_id: str | None
    job_id: str
    delivery_mode: int | None
    content_type: str | None


class Broker:
    """A blocking connection for looking at the broker; `cleanup()` deletes what the test's settings name
    and any queue declared through `declare_queue`."""

    def __init__(self, url: str, settings: Settings) -> None:
        self.settings = settings
        self._params = pika.URLParameters(url)
        self.connection = pika.BlockingConnection(self._params)
        self.channel = self.connection.channel()
        self._extra_queues: list[str] = []

    def declare_topology(self) -> None:
        topology.declare(self.channel, self.settings)

    def declare_queue(self, name: str, arguments: dict[str, Any], *, bind: bool = True) -> None:
        """A further queue of the test's own, bound to the test's exchange with the relay's routing key."""
        self.channel.queue_declare(name, durable=False, arguments=arguments)
        self._extra_queues.append(name)
        if bind:
            self.channel.queue_bind(name, self.settings.exchange, routing_key=topology.ROUTING_KEY)

    def count(self, queue: str | None = None) -> int:
        method = self.channel.queue_declare(queue or self.settings.queue, passive=True).method
        return int(method.message_count)

    def take_all(self, queue: str | None = None, *, quiet_seconds: float = 1.0) -> list[Delivered]:
        """Consume (and ack) every message in `queue`, until none arrives for `quiet_seconds`."""
        taken: list[Delivered] = []
        for method, properties, body in self.channel.consume(
            queue or self.settings.queue, inactivity_timeout=quiet_seconds
        ):
            if method is None:
                break
            self.channel.basic_ack(method.delivery_tag)
            taken.append(
                Delivered(
                    properties.message_id,
                    JobMessage.decode(body).job_id,
                    properties.delivery_mode,
                    properties.content_type,
                )
            )
        self.channel.cancel()
        return taken

    def cleanup(self) -> None:
        """Delete the test's queues and exchanges, on a fresh connection (the test's may have died)."""
        if self.connection.is_open:
            self.connection.close()
        with closing(pika.BlockingConnection(self._params)) as connection:
            channel = connection.channel()
            for queue in self._extra_queues:
                channel.queue_delete(queue)
            topology.delete(channel, self.settings)


@contextmanager
def running_consumer(settings: Settings, engine: Engine, *, concurrency: int) -> Iterator[Consumer]:
    """A consumer (its broker link and worker threads) running in this process; shut down on exit."""
    consumer = Consumer(engine, settings, concurrency=concurrency).start()
    try:
        yield consumer
    finally:
        consumer.shutdown()


@contextmanager
def running_relay(settings: Settings, engine: Engine) -> Iterator[Relay]:
    """A relay running on its own thread of this process; stopped (and waited for, as long as its shutdown
    may take) on exit."""
    timeout = settings.shutdown_grace_seconds + WRITE_BACK_GRACE_SECONDS + 5
    relay = Relay(settings, engine)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            relay.run()
        except BaseException as exc:  # surfaced to the test below
            failure.append(exc)

    thread = threading.Thread(target=run, name="relay-under-test", daemon=True)
    thread.start()
    try:
        yield relay
    finally:
        relay.request_stop()
        thread.join(timeout)
        assert not thread.is_alive(), "the relay did not stop"
        if failure:
            raise failure[0]

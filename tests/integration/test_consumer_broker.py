"""The consumer in this process against a real RabbitMQ and a real SQLite file: messages are published here
with pika (as the relay would), the consumer claims, runs, group-commits and acks them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pika
import pytest
from pydantic import BaseModel
from sqlalchemy import Engine, select

from outbox_bridge.broker import topology
from outbox_bridge.broker.message import NORMAL_RANK, JobMessage, order_headers
from outbox_bridge.consumer.main import Consumer
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.base import JobContext, Kind
from outbox_bridge.handlers.registry import KINDS
from outbox_bridge.jobstore import db, migrate, queries
from outbox_bridge.jobstore.schema import outbox
from outbox_bridge.jobstore.states import State
from tests.conftest import make_settings
from tests.support.faultproxy import FaultProxy
from tests.support.invariants import check_invariants, read_starts
from tests.support.procs import wait_for
from tests.support.relay_harness import running_consumer
from tests.support.store import new_jobs

pytestmark = pytest.mark.broker


class Broker:
    """A publishing channel on this test's own exchange and queues, removed afterwards."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        self.settings = settings
        self.engine = engine
        self.connection = pika.BlockingConnection(pika.URLParameters(settings.rabbitmq_url))
        self.channel = self.connection.channel()
        topology.declare(self.channel, settings)

    def publish(
        self, job_id: str, *, body: bytes | None = None, headers: dict[str, Any] | None = None
    ) -> None:
        properties = pika.BasicProperties(delivery_mode=2, message_id=job_id, headers=headers)
        body = JobMessage(job_id).encode() if body is None else body
        self.channel.basic_publish(self.settings.exchange, topology.ROUTING_KEY, body, properties)

    def depth(self, queue: str | None = None) -> int:
        """Messages in the queue, ready or unacked (a consumer's unacked ones count once it is gone)."""
        declared = self.channel.queue_declare(queue or self.settings.queue, passive=True)
        return int(declared.method.message_count)

    def close(self) -> None:
        topology.delete(self.channel, self.settings)
        self.connection.close()


@pytest.fixture
def broker(tmp_path: Path, rabbitmq_url: str) -> Iterator[Broker]:
    """This test's store (a SQLite file) and its own exchange and queues on the real broker."""
    settings = make_settings(
        tmp_path, rabbitmq_url=rabbitmq_url, lease_seconds=3.0, shutdown_grace_seconds=5.0
    )
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    b = Broker(settings, engine)
    yield b
    b.close()
    engine.dispose()


def via(broker: Broker, **changes: Any) -> Settings:
    """The test's settings with some changed (same store, same broker names)."""
    return broker.settings.model_copy(update=changes)


def states(engine: Engine) -> dict[str, int]:
    return db.read(engine, queries.counts_by_state)


def job(engine: Engine, job_id: str) -> Any:
    return db.read(engine, queries.get_job, job_id)


def wait_succeeded(engine: Engine, count: int, timeout: float = 20.0) -> None:
    wait_for(lambda: states(engine)["succeeded"] >= count, timeout, what=f"{count} jobs succeeded")


def test_published_jobs_run_once_and_every_delivery_is_acked(broker: Broker) -> None:
    engine = broker.engine
    ids = new_jobs(engine, 60, kind="noop", payload={})
    with running_consumer(broker.settings, engine, concurrency=4) as consumer:
        for job_id in ids:
            broker.publish(job_id)
        wait_succeeded(engine, 60)
    assert broker.depth() == 0, "every delivery was acked, none went back to the queue at close"
    assert consumer.pools[0].writer.counts["committed"] == 60
    check_invariants(broker.settings, accepted=ids, engine=engine)


def test_outcomes_finishing_together_are_committed_in_shared_transactions(
    broker: Broker,
) -> None:
    engine = broker.engine
    ids = new_jobs(engine, 40, kind="sleep", payload={"seconds": 0.3})
    with running_consumer(broker.settings, engine, concurrency=20) as consumer:
        for job_id in ids:
            broker.publish(job_id)
        wait_succeeded(engine, 40)
    counts = consumer.pools[0].writer.counts
    assert counts["committed"] == 40
    assert counts["commit_rounds"] <= 20, f"40 outcomes took {counts['commit_rounds']} commits"
    check_invariants(broker.settings, accepted=ids, engine=engine)


def test_duplicate_delivery_after_commit_is_acked_without_rerun(broker: Broker) -> None:
    engine = broker.engine
    [job_id] = new_jobs(engine, kind="noop", payload={})
    with running_consumer(broker.settings, engine, concurrency=4) as consumer:
        broker.publish(job_id)
        wait_succeeded(engine, 1)
        broker.publish(job_id)
        wait_for(lambda: consumer.pools[0].writer.counts["refused"] == 1, 10, what="the duplicate refused")
    assert broker.depth() == 0
    assert read_starts(broker.settings)[job_id] == [1]
    check_invariants(broker.settings, accepted=[job_id], engine=engine)


def test_undecodable_message_is_dead_lettered_and_nothing_else_is_disturbed(
    broker: Broker,
) -> None:
    engine = broker.engine
    ids = new_jobs(engine, 3, kind="noop", payload={})
    with running_consumer(broker.settings, engine, concurrency=4):
        broker.publish(ids[0])
        broker.publish("poison", body=b"\x00not json")
        for job_id in ids[1:]:
            broker.publish(job_id)
        wait_succeeded(engine, 3)
        wait_for(lambda: broker.depth(broker.settings.dead_letter_queue) == 1, 10, what="dead-lettering")
    _, _, body = broker.channel.basic_get(broker.settings.dead_letter_queue, auto_ack=True)
    assert body == b"\x00not json"
    assert broker.depth() == 0
    check_invariants(broker.settings, accepted=ids, engine=engine)


def test_heartbeats_keep_flowing_while_a_job_outlasts_several_heartbeat_timeouts(
    broker: Broker,
) -> None:
    url = broker.settings.rabbitmq_url
    settings = via(broker, rabbitmq_url=url + ("&" if "?" in url else "?") + "heartbeat=1")
    engine = broker.engine
    [job_id] = new_jobs(engine, kind="sleep", payload={"seconds": 4.0})
    with running_consumer(settings, engine, concurrency=4) as consumer:
        broker.publish(job_id)
        wait_succeeded(engine, 1, timeout=15)
        assert consumer.pools[0].link.generation == 1, "the connection survived the job"
    assert broker.depth() == 0
    check_invariants(settings, accepted=[job_id], engine=engine)


def test_ack_for_a_delivery_from_a_lost_connection_is_never_sent_on_the_new_one(
    broker: Broker,
) -> None:
    upstream = urlsplit(broker.settings.rabbitmq_url)
    with FaultProxy((upstream.hostname or "127.0.0.1", upstream.port or 5672)) as proxy:
        settings = via(broker, rabbitmq_url=proxy.url_for(broker.settings.rabbitmq_url))
        engine = broker.engine
        [job_id] = new_jobs(engine, kind="sleep", payload={"seconds": 1.5})
        with running_consumer(settings, engine, concurrency=4) as consumer:
            wait_for(consumer.pools[0].link.connected, 10, what="the consumer connected")
            broker.publish(job_id)
            wait_for(lambda: job_id in read_starts(settings), 10, what="the job started")
            assert proxy.cut() >= 1
            wait_succeeded(engine, 1)
            # The broker redelivers the message on connection 2; the claim refuses it as finished.
            wait_for(
                lambda: consumer.pools[0].writer.counts["refused"] == 1, 15, what="the redelivery refused"
            )
            time.sleep(0.5)  # an ack of a dead channel's tag on the new one would close it: give it time
            assert consumer.pools[0].link.generation == 2, "no channel error forced a third connection"
    assert broker.depth() == 0
    assert read_starts(settings)[job_id] == [1]
    check_invariants(settings, accepted=[job_id], engine=engine)


def test_degraded_mode_runs_accepted_jobs_while_the_broker_is_unreachable_then_returns_to_it(
    broker: Broker,
) -> None:
    upstream = urlsplit(broker.settings.rabbitmq_url)
    with FaultProxy((upstream.hostname or "127.0.0.1", upstream.port or 5672)) as proxy:
        proxy.refuse()
        settings = via(
            broker, rabbitmq_url=proxy.url_for(broker.settings.rabbitmq_url), degraded_after_seconds=0.5
        )
        engine = broker.engine
        offline = new_jobs(engine, 5, kind="noop", payload={})
        with running_consumer(settings, engine, concurrency=4) as consumer:
            wait_succeeded(engine, 5)
            assert consumer.pools[0].degraded.claimed == 5
            assert consumer.pools[0].writer.counts["claimed"] == 0
            proxy.listen()
            wait_for(lambda: not consumer.pools[0].degraded.active, 15, what="degraded mode left")
            online = new_jobs(engine, 1, kind="noop", payload={})
            broker.publish(online[0])
            wait_succeeded(engine, 6)
            assert consumer.pools[0].writer.counts["claimed"] == 1
            assert consumer.pools[0].degraded.claimed == 5, (
                "nothing was claimed from the table once reconnected"
            )
    check_invariants(settings, accepted=offline + online, engine=engine)


def test_connected_consumer_never_reads_the_jobs_table(broker: Broker) -> None:
    engine = broker.engine
    new_jobs(engine, 3, kind="noop", payload={})  # claimable work in the table, never published
    with running_consumer(via(broker, degraded_after_seconds=1.0), engine, concurrency=4) as consumer:
        wait_for(consumer.pools[0].link.connected, 10, what="the consumer connected")
        before = db.stats.snapshot()
        time.sleep(1.5)  # longer than degraded mode's threshold
        after = db.stats.snapshot()
    assert after["statements"] == before["statements"]
    assert states(engine)["queued"] == 3


def test_shutdown_releases_a_job_that_outlasts_the_grace_period(broker: Broker) -> None:
    settings = via(broker, shutdown_grace_seconds=0.5)
    engine = broker.engine
    [job_id] = new_jobs(engine, kind="sleep", payload={"seconds": 60})
    consumer = Consumer(engine, settings, concurrency=2).start()
    broker.publish(job_id)
    wait_for(lambda: job_id in read_starts(settings), 10, what="the job started")
    started = time.monotonic()
    consumer.shutdown()
    assert time.monotonic() - started < 5
    released = job(engine, job_id)
    assert released.state is State.QUEUED and released.attempts == 0
    assert [a.outcome for a in db.read(engine, queries.attempts_of, job_id)] == ["released"]
    unpublished = select(outbox.c.id).where(outbox.c.published_at.is_(None))
    pending = db.read(engine, lambda conn: conn.execute(unpublished).all())
    assert len(pending) == 2, "the accept's row and the release's new row wait for the relay"
    assert broker.depth() == 0, "the delivery was acked: the new outbox row delivers the job again"


class Pause(BaseModel):
    seconds: float


def run_external_then_pause(ctx: JobContext, payload: Pause) -> dict[str, Any]:
    ctx.mark_external_started()
    time.sleep(payload.seconds)
    return {"sent": True}


def test_shutdown_waits_for_a_job_whose_external_effect_started(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(KINDS, "external", Kind("external", Pause, run_external_then_pause))
    settings = via(
        broker, shutdown_grace_seconds=0.3, allowed_kinds=(*broker.settings.allowed_kinds, "external")
    )
    engine = broker.engine
    [job_id] = new_jobs(engine, kind="external", payload={"seconds": 1.5})
    consumer = Consumer(engine, settings, concurrency=2).start()
    broker.publish(job_id)
    wait_for(lambda: job_id in read_starts(settings), 10, what="the job started")
    time.sleep(0.2)
    consumer.shutdown()
    assert job(engine, job_id).state is State.SUCCEEDED, "not released: it was finished"
    assert broker.depth() == 0
    check_invariants(settings, accepted=[job_id], engine=engine)


def test_a_live_consumer_never_gives_a_delivery_back_under_a_mix_of_short_and_long_jobs(
    broker: Broker,
) -> None:
    # A queue that dead-letters a message the second time it is returned: any give-back that pacing did
    # would show up as a stranded job.
    names = {name: f"{getattr(broker.settings, name)}.strict" for name in ("exchange", "queue")}
    names |= {
        name: f"{getattr(broker.settings, name)}.strict"
        for name in ("dead_letter_exchange", "dead_letter_queue")
    }
    strict = Broker(via(broker, delivery_limit=1, **names), broker.engine)
    engine = broker.engine
    short = new_jobs(engine, 240, kind="noop", payload={})
    long = new_jobs(engine, 40, kind="sleep", payload={"seconds": 0.08})
    order = [*short[:60], *[job_id for pair in zip(short[60:100], long, strict=True) for job_id in pair]]
    order += short[100:]
    requeued: list[str] = []
    try:
        with running_consumer(strict.settings, engine, concurrency=3) as consumer:
            requeue = consumer.pools[0].link.requeue

            def recording(deliveries: Any) -> int:
                requeued.extend(d.job_id for d in deliveries)
                return requeue(deliveries)

            consumer.pools[0].link.requeue = recording  # type: ignore[method-assign]
            for wave in (order[:60], order[60:140], order[140:]):  # bursts of short jobs, then a mix
                for job_id in wave:
                    strict.publish(job_id)
                time.sleep(0.3)
            try:
                wait_succeeded(engine, len(order), timeout=30)
            except AssertionError as exc:
                dead = strict.depth(strict.settings.dead_letter_queue)
                seen = f"{states(engine)}, {len(requeued)} given back, {dead} dead-lettered"
                raise AssertionError(f"{exc}: {seen}") from None
            assert requeued == [], "a running consumer gave deliveries back to the queue"
        assert strict.depth(strict.settings.dead_letter_queue) == 0
        assert strict.depth() == 0
        check_invariants(strict.settings, accepted=order, engine=engine)
    finally:
        strict.close()


def claim_ahead_then_slow_jobs(broker: Broker, tenants: tuple[str, ...]) -> tuple[int, list[str], list[str]]:
    """Short jobs first, so the consumer claims ahead; then slow ones of `tenants` in turn, which it claims
    ahead too until the first runs long. How many it gave back, and the short and slow jobs' ids."""
    engine = broker.engine
    short = new_jobs(engine, 40, kind="noop", payload={})
    slow = new_jobs(engine, 24, kind="sleep", payload={"seconds": 0.15})
    with running_consumer(broker.settings, engine, concurrency=2) as consumer:
        for job_id in short:  # of the first tenant, as the store has them: no other tenant is seen here
            broker.publish(job_id, headers=order_headers(NORMAL_RANK, tenants[0]))
        wait_succeeded(engine, len(short))
        for n, job_id in enumerate(slow):
            broker.publish(job_id, headers=order_headers(NORMAL_RANK, tenants[n % len(tenants)]))
        wait_succeeded(engine, len(short) + len(slow), timeout=30)
        return consumer.pools[0].writer.counts["shed"], short, slow


def test_jobs_claimed_ahead_of_a_long_kind_are_given_back_and_still_run_once(broker: Broker) -> None:
    # Two tenants: the jobs still waiting for a thread once one runs long go back to the store (for a
    # consumer with a thread free), and their deliveries wait here: with no relay and no other consumer,
    # this one runs them.
    shed, short, slow = claim_ahead_then_slow_jobs(broker, ("acme", "globex"))
    assert shed > 0, "the consumer never claimed ahead of the slow jobs, so this test showed nothing"
    seen = check_invariants(broker.settings, accepted=[*short, *slow], engine=broker.engine)
    for job_id in slow:
        assert seen.jobs[job_id].attempts == 1, "a job given back before it ran does not count an attempt"
    assert broker.depth() == 0


def test_a_consumer_holding_one_tenants_jobs_gives_nothing_back(broker: Broker) -> None:
    # One priority, one tenant: no job waits behind another's, so giving back would only claim the same
    # jobs again, each under a second epoch.
    shed, short, slow = claim_ahead_then_slow_jobs(broker, ("acme",))
    assert shed == 0
    seen = check_invariants(broker.settings, accepted=[*short, *slow], engine=broker.engine)
    assert all(seen.jobs[job_id].epoch == 1 for job_id in slow), "no job was claimed twice"

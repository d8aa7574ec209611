"""The relay's dead-letter check against a real RabbitMQ and the test's store: a dead-lettered message of a
job that is still queued announces the job again; every other one is dropped, but an undecodable message,
which stays parked for an operator."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from sqlalchemy import Connection, Engine, select, update

from outbox_bridge.broker import topology
from outbox_bridge.broker.connection import NO_ANSWER, NO_QUEUE, queue_depth, queue_probe
from outbox_bridge.broker.message import JobMessage
from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, intake, operator, queries
from outbox_bridge.jobstore.schema import outbox
from outbox_bridge.jobstore.states import State
from outbox_bridge.relay.deadletters import Checked, DeadLetterCheck
from tests.conftest import make_settings
from tests.support.procs import BIN, settings_env, wait_for
from tests.support.relay_harness import running_relay
from tests.support.store import add_job

pytestmark = pytest.mark.broker

GARBAGE = b"\x00not a job message"


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str) -> Settings:
    return make_settings(tmp_path, rabbitmq_url=rabbitmq_url, dead_letter_check_seconds=0.1)


@pytest.fixture
def channel(settings: Settings) -> Iterator[pika.adapters.blocking_connection.BlockingChannel]:
    connection = pika.BlockingConnection(pika.URLParameters(settings.rabbitmq_url))
    ch = connection.channel()
    topology.declare(ch, settings)
    yield ch
    topology.delete(ch, settings)
    connection.close()


def dead_letter(
    channel: pika.adapters.blocking_connection.BlockingChannel, settings: Settings, body: bytes
) -> None:
    """Put a message in the dead-letter queue as the broker does when it dead-letters one."""
    properties = pika.BasicProperties(delivery_mode=2, message_id="1")
    channel.basic_publish(settings.dead_letter_exchange, topology.ROUTING_KEY, body, properties)


def depth(channel: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> int:
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def queued(engine: Engine, *, published: bool) -> str:
    """A queued job; its outbox row already published (its message went out) or still waiting."""

    def write(conn: Connection) -> str:
        now = clock.now()
        job_id = add_job(conn, intake.new_id(), now=now).job.id
        if published:
            conn.execute(update(outbox).where(outbox.c.job_id == job_id).values(published_at=now))
        return job_id

    return db.transact(engine, write)


def waiting_rows(engine: Engine, job_id: str) -> int:
    query = select(outbox.c.id).where(outbox.c.job_id == job_id, outbox.c.published_at.is_(None))
    return len(db.read(engine, lambda conn: conn.execute(query).all()))


def test_each_dead_lettered_message_is_settled_from_the_store_and_only_undecodable_ones_stay(
    settings: Settings, engine: Engine, channel: pika.adapters.blocking_connection.BlockingChannel
) -> None:
    lost = queued(engine, published=True)  # queued, its message went out and was dead-lettered
    announced = queued(engine, published=False)  # queued, a new delivery already waits for the relay
    finished = queued(engine, published=True)
    db.transact(engine, operator.request_cancel, finished, clock.now())
    for job_id in (lost, announced, finished, intake.new_id()):
        dead_letter(channel, settings, JobMessage(job_id).encode())
    dead_letter(channel, settings, GARBAGE)

    check = DeadLetterCheck(settings, engine)
    try:
        checked = check.check()
        later: list[Checked] = []

        def parked_again() -> bool:
            later.append(check.check())
            return later[-1].parked == 1

        wait_for(parked_again, 5, what="the parked message again")
    finally:
        check.close()

    assert dict(checked.outcomes) == {
        "announced again": 1,
        "already announced": 1,
        "not queued": 1,
        "unknown job": 1,
    }
    assert (checked.parked, checked.left) == (1, 1)
    assert waiting_rows(engine, lost) == 1, "the lost job has a new delivery waiting for the relay"
    assert waiting_rows(engine, announced) == 1, "no second delivery for a job that already has one"
    assert waiting_rows(engine, finished) == 0
    assert db.read(engine, queries.get_job, finished).state is State.CANCELLED
    assert all(not c.outcomes for c in later), "nothing but the undecodable one stayed"
    parked: list[bytes] = []

    def take_parked() -> bool:
        _, _, body = channel.basic_get(settings.dead_letter_queue, auto_ack=True)
        parked.extend([body] if body is not None else [])
        return bool(parked)

    wait_for(take_parked, 5, what="the parked message back in the dead-letter queue")
    assert parked == [GARBAGE]


def test_a_running_relay_publishes_a_dead_lettered_job_again_within_seconds(
    settings: Settings, engine: Engine, channel: pika.adapters.blocking_connection.BlockingChannel
) -> None:
    lost = queued(engine, published=True)
    dead_letter(channel, settings, JobMessage(lost).encode())
    with running_relay(settings, engine):
        wait_for(lambda: depth(channel, settings.queue) == 1, 10, what="the job published again")
        wait_for(lambda: depth(channel, settings.dead_letter_queue) == 0, 10, what="jobs.dead emptied")
    _, _, body = channel.basic_get(settings.queue, auto_ack=True)
    assert JobMessage.decode(body).job_id == lost
    assert waiting_rows(engine, lost) == 0, "the new outbox row was published"


def test_dead_letter_depth_is_none_when_the_broker_does_not_answer(settings: Settings) -> None:
    unreachable = settings.model_copy(update={"rabbitmq_url": "amqp://guest:guest@127.0.0.1:1/%2F"})
    assert queue_depth(unreachable, unreachable.dead_letter_queue, timeout=1.0) is None
    assert queue_probe(unreachable, unreachable.dead_letter_queue, timeout=1.0).problem == NO_ANSWER


def test_a_queue_that_does_not_exist_is_told_apart_from_a_broker_that_does_not_answer(
    settings: Settings,
) -> None:
    missing = queue_probe(settings, f"no-such-queue-{settings.queue}")
    assert (missing.messages, missing.problem) == (None, NO_QUEUE)
    assert str(missing) == "the broker answered: the queue does not exist"


def test_status_shows_how_many_messages_wait_in_the_dead_letter_queue(
    settings: Settings, engine: Engine, channel: pika.adapters.blocking_connection.BlockingChannel
) -> None:
    dead_letter(channel, settings, GARBAGE)
    wait_for(lambda: queue_depth(settings, settings.dead_letter_queue) == 1, 5, what="the message counted")
    env = settings_env(settings)
    shown = subprocess.run([str(BIN), "status"], env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert f"dead-letter queue {settings.dead_letter_queue}: 1 messages" in " ".join(shown.stdout.split())


def test_a_relay_survives_an_error_raised_out_of_its_event_loop_and_publishes_on(
    settings: Settings, engine: Engine, channel: pika.adapters.blocking_connection.BlockingChannel
) -> None:
    def boom() -> None:
        raise ValueError("Expected connected socket, but getpeername() failed")  # as pika raised once

    with running_relay(settings, engine) as relay:
        wait_for(lambda: relay.connected, 10, what="the relay connected")
        relay.loop.ioloop.add_callback_threadsafe(boom)
        wait_for(lambda: relay.connected, 10, what="the relay connected again")
        job_id = queued(engine, published=False)
        wait_for(lambda: depth(channel, settings.queue) == 1, 10, what="the job published")
    assert waiting_rows(engine, job_id) == 0

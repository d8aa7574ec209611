"""Completion webhooks through a real `outbox-bridge relay`: deliveries written while no relay runs are sent
once one starts, and a relay SIGKILLed while a receiver holds its request loses nothing: the relay that
takes the role next sends the delivery again, under the same `webhook-id`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, fenced
from outbox_bridge.jobstore.webhooks import DeliveryState
from tests.conftest import make_settings
from tests.support import procs
from tests.support.relay_harness import Broker
from tests.support.store import claimed, new_job
from tests.support.webhooks import add_endpoint, attempt_rows, deliveries, receiver, verify

pytestmark = pytest.mark.broker


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str) -> Settings:
    return make_settings(
        tmp_path,
        rabbitmq_url=rabbitmq_url,
        webhook_poll_seconds=0.05,
        webhook_backoff_base_seconds=0.05,
        webhook_backoff_max_seconds=0.2,
        webhook_timeout_seconds=5.0,
        webhook_allow_private=True,  # the receiver is on 127.0.0.1
    )


@pytest.fixture
def broker(settings: Settings, rabbitmq_url: str) -> Iterator[Broker]:
    broker = Broker(rabbitmq_url, settings)
    yield broker
    broker.cleanup()


def finish(engine: Engine, key: str) -> str:
    held = claimed(engine, new_job(engine, key))
    db.transact(engine, fenced.complete, held.job_id, held.epoch, held.attempt_id, {}, clock.now())
    return held.job_id


def test_deliveries_written_while_no_relay_runs_are_sent_when_one_starts(
    tmp_path: Path, settings: Settings, engine: Engine, broker: Broker, started: list[procs.Proc]
) -> None:
    with receiver(lambda _path, _count: 200) as got:
        _, secret = add_endpoint(engine, settings, "acme", f"{got.url}/hook")
        jobs = {finish(engine, f"k{n}") for n in range(3)}
        assert {d.state for d in deliveries(engine)} == {DeliveryState.PENDING}
        relay = procs.start(["relay"], settings, tmp_path / "logs", "relay")
        started.append(relay)
        requests = got.wait_for("/hook", 3, timeout=15)
        procs.wait_for(
            lambda: {d.state for d in deliveries(engine)} == {DeliveryState.DELIVERED}, 5, what="delivered"
        )
        assert relay.terminate(30) == 0
    assert {r.event()["subject"] for r in requests} == jobs
    assert all(verify(secret, r.headers, r.body) for r in requests)
    assert len(requests) == 3


def test_a_relay_killed_while_its_request_hangs_loses_nothing(
    tmp_path: Path, settings: Settings, engine: Engine, broker: Broker, started: list[procs.Proc]
) -> None:
    # The first request hangs (the relay is killed holding it); every later one is answered 200.
    with receiver(lambda _path, count: None if count == 1 else 200) as got:
        add_endpoint(engine, settings, "acme", f"{got.url}/hook")
        finish(engine, "k")
        doomed = procs.start(["relay"], settings, tmp_path / "logs", "relay-killed")
        started.append(doomed)
        (held,) = got.wait_for("/hook", 1, timeout=15)
        doomed.kill()
        (delivery,) = deliveries(engine)
        assert delivery.state is DeliveryState.PENDING and delivery.attempts == 0

        successor = procs.start(["relay"], settings, tmp_path / "logs", "relay-successor")
        started.append(successor)
        again = got.wait_for("/hook", 2, timeout=15)[1]
        procs.wait_for(lambda: deliveries(engine)[0].state is DeliveryState.DELIVERED, 5, what="delivered")
        assert successor.terminate(30) == 0
    assert held.headers["webhook-id"] == again.headers["webhook-id"] == delivery.id
    assert [a["status_code"] for a in attempt_rows(engine, delivery.id)] == [200]

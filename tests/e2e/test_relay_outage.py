"""Broker outages between a relay process and RabbitMQ, made by a fault proxy: refused connections and
cut connections. The outbox holds the rows; the relay keeps the store tidy and drains it once it can."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sqlalchemy import Engine

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import claiming, db, queries
from outbox_bridge.jobstore.states import State
from tests.conftest import make_settings
from tests.support import procs
from tests.support.faultproxy import FaultProxy
from tests.support.relay_harness import Broker, outbox_rows, seed_jobs, unpublished

pytestmark = [pytest.mark.broker, pytest.mark.slow]


@pytest.fixture
def proxy(rabbitmq_url: str) -> Iterator[FaultProxy]:
    target = urlsplit(rabbitmq_url)
    with FaultProxy((target.hostname or "127.0.0.1", target.port or 5672)) as proxy:
        yield proxy


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str, proxy: FaultProxy) -> Settings:
    # Nobody consumes here: the relay publishes everything due (no window), as these tests count on.
    url = proxy.url_for(rabbitmq_url)
    return make_settings(tmp_path, rabbitmq_url=url, sweep_interval_seconds=0.2, publish_ahead=0)


@pytest.fixture
def broker(settings: Settings, rabbitmq_url: str) -> Iterator[Broker]:
    broker = Broker(rabbitmq_url, settings)
    yield broker
    broker.cleanup()


def _state(engine: Engine, job_id: str) -> State:
    job = db.read(engine, queries.get_job, job_id)
    assert job is not None
    return job.state


def test_relay_started_while_the_broker_refuses_keeps_sweeping_and_drains_when_it_returns(
    tmp_path: Path, settings: Settings, engine: Engine, broker: Broker, proxy: FaultProxy
) -> None:
    proxy.refuse()
    job_ids = seed_jobs(engine, 200)
    # A worker took one job and vanished: its lease runs out while the broker is away.
    db.transact(engine, claiming.claim, job_ids[0], "vanished-worker", clock.now(), 0.5)
    relay = procs.start(["relay"], settings, tmp_path / "logs", "relay")
    try:
        procs.wait_for(lambda: _state(engine, job_ids[0]) is State.QUEUED, 15, what="the expired lease swept")
        procs.wait_for(lambda: relay.output().count("reconnecting in") >= 3, 15, what="reconnect attempts")
        assert relay.alive()
        assert unpublished(engine) == len(outbox_rows(engine)) == 201  # the retry got its own row
        proxy.listen()
        procs.wait_for(lambda: unpublished(engine) == 0, 30, what="the outbox drained")
    finally:
        code = relay.terminate(30)
    assert code == 0
    message_ids = sorted(int(m.message_id or 0) for m in broker.take_all())
    assert message_ids == [row.id for row in outbox_rows(engine)]


def test_relay_publishes_everything_through_connections_cut_mid_stream(
    tmp_path: Path, settings: Settings, engine: Engine, broker: Broker, proxy: FaultProxy
) -> None:
    rows = 3000
    seed_jobs(engine, rows, spread_seconds=3.0)
    relay = procs.start(["relay"], settings, tmp_path / "logs", "relay")
    try:
        for cuts, remaining in enumerate((2500, 1500)):
            procs.wait_for(
                lambda r=remaining: unpublished(engine) < r, 20, what=f"fewer than {remaining} left"
            )
            procs.wait_for(
                lambda c=cuts: relay.output().count("broker connection up") > c,
                10,
                what="the relay connected",
            )
            assert proxy.cut() >= 1
        procs.wait_for(lambda: unpublished(engine) == 0, 30, what="the outbox drained")
    finally:
        code = relay.terminate(30)
    assert code == 0
    assert relay.log_path.read_text().count("broker connection lost") >= 2
    delivered = {m.message_id for m in broker.take_all()}
    assert delivered == {str(row.id) for row in outbox_rows(engine)}

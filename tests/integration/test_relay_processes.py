"""Several `outbox-bridge relay` processes on one store: the row lease keeps them from publishing a row
twice."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from core import clock
from core.settings import Settings
from tests.conftest import make_settings
from tests.support import procs
from tests.support.relay_harness import Broker, delay_outbox, outbox_rows, seed_jobs, unpublished

pytestmark = pytest.mark.broker


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str) -> Settings:
    # Small batches and windows, so the two relays take turns many times.
    # Nobody consumes here: no publish-ahead window, so every row is published.
    return make_settings(
        tmp_path, rabbitmq_url=rabbitmq_url, relay_batch_size=50, relay_window=200, publish_ahead=0
    )


@pytest.fixture
def broker(settings: Settings, rabbitmq_url: str) -> Iterator[Broker]:
    broker = Broker(rabbitmq_url, settings)
    yield broker
    broker.cleanup()


def _marked(log: str) -> int:
    match = re.search(r"relay stopped \(clean\): .*marked (\d+)", log)
    assert match, log[-2000:]
    return int(match.group(1))


def test_two_relay_processes_publish_each_row_exactly_once(
    tmp_path: Path, settings: Settings, engine: Engine, broker: Broker
) -> None:
    rows = 2000
    seed_jobs(engine, rows)
    delay_outbox(engine, clock.now() + 3600)
    relays = [procs.start(["relay"], settings, tmp_path / "logs", f"relay-{n}") for n in (1, 2)]
    try:
        for relay in relays:
            procs.wait_for(lambda r=relay: "broker connection up" in r.output(), 20, what="relay connected")
        delay_outbox(engine, clock.now())  # everything comes due at once, with both relays polling
        procs.wait_for(lambda: unpublished(engine) == 0, 30, what="all rows published")
    finally:
        codes = [relay.terminate(30) for relay in relays]
    assert codes == [0, 0]
    messages = broker.take_all()
    assert sorted(int(m.message_id or 0) for m in messages) == [row.id for row in outbox_rows(engine)]
    marked = [_marked(relay.log_path.read_text()) for relay in relays]
    assert sum(marked) == rows
    assert min(marked) > 0, f"one relay did all the work: {marked}"

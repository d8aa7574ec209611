"""Several `outbox-bridge relay` processes on one store publish each row once: one of them holds the relay
role and publishes, the others stand by and take the role over when its holder stops or dies."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.relay.leader import LEADER_SECONDS
from tests.conftest import make_settings
from tests.support import procs
from tests.support.relay_harness import Broker, delay_outbox, outbox_rows, seed_jobs, unpublished

HOLDING = "holding the relay role"

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
        # Read before they stop: the holder hands the role back as it stops, and the other may take it.
        held = [HOLDING in relay.output() for relay in relays]
    finally:
        codes = [relay.terminate(30) for relay in relays]
    assert codes == [0, 0]
    messages = broker.take_all()
    assert sorted(int(m.message_id or 0) for m in messages) == [row.id for row in outbox_rows(engine)]
    marked = [_marked(relay.log_path.read_text()) for relay in relays]
    assert sum(marked) == rows
    # The holder of the role published everything; the other stood by.
    assert sorted(marked) == [0, rows], marked
    assert sum(held) == 1, held


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_standby_relay_takes_the_role_over_when_its_holder_stops(
    tmp_path: Path, settings: Settings, engine: Engine, broker: Broker, stop: signal.Signals
) -> None:
    logs = tmp_path / "logs"
    first = procs.start(["relay"], settings, logs, "relay-1")
    second = None
    try:
        procs.wait_for(lambda: HOLDING in first.output(), 20, what="the first relay holds the role")
        second = procs.start(["relay"], settings, logs, "relay-2")
        procs.wait_for(
            lambda: "broker connection up" in second.output(), 20, what="the second relay connected"
        )
        seed_jobs(engine, 50)
        procs.wait_for(lambda: unpublished(engine) == 0, 20, what="the holder published the first rows")
        assert HOLDING not in second.output()
        first.signal(stop)
        first.wait(30)
        # A holder that stopped hands the role back; one killed is seen gone (its pid, on this host): either
        # way the standby takes over at its next look, not when the role would have expired.
        procs.wait_for(lambda: HOLDING in second.output(), 5, what="the second relay took the role over")
        seed_jobs(engine, 50)
        procs.wait_for(lambda: unpublished(engine) == 0, 20, what="the new holder published the later rows")
    finally:
        first.kill()
        code = second.terminate(30) if second is not None else 0
    assert code == 0
    assert _marked(second.log_path.read_text()) >= 50
    published = sorted(int(m.message_id or 0) for m in broker.take_all())
    assert set(published) == {row.id for row in outbox_rows(engine)}


def test_a_holder_stopped_past_its_role_publishes_again_once_resumed(
    tmp_path: Path, settings: Settings, engine: Engine, broker: Broker
) -> None:
    relay = procs.start(["relay"], settings, tmp_path / "logs", "relay")
    try:
        procs.wait_for(lambda: HOLDING in relay.output(), 20, what="the relay holds the role")
        relay.signal(signal.SIGSTOP)
        try:
            seed_jobs(engine, 20)  # notified while stopped: the notifications wait in its socket
            time.sleep(LEADER_SECONDS + 1)  # its role runs out meanwhile
        finally:
            relay.signal(signal.SIGCONT)
        procs.wait_for(lambda: unpublished(engine) == 0, 10, what="the rows published once it was resumed")
        seed_jobs(engine, 20)
        procs.wait_for(lambda: unpublished(engine) == 0, 10, what="later rows published too")
    finally:
        code = relay.terminate(30)
    assert code == 0
    assert len(broker.take_all()) == 40

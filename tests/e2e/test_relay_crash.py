"""The relay as a user runs it, killed or stopped at its boundaries."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from outbox_bridge.core.settings import Settings
from tests.conftest import make_settings
from tests.support import procs
from tests.support.relay_harness import Broker, outbox_rows, seed_jobs, unpublished

pytestmark = pytest.mark.broker


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str) -> Settings:
    # Nobody consumes here: the relay publishes everything due (no window), as these tests count on.
    return make_settings(tmp_path, rabbitmq_url=rabbitmq_url, relay_lease_seconds=1.0, publish_ahead=0)


@pytest.fixture
def broker(settings: Settings, rabbitmq_url: str) -> Iterator[Broker]:
    broker = Broker(rabbitmq_url, settings)
    yield broker
    broker.cleanup()


def test_relay_killed_between_confirm_and_mark_publishes_the_row_again_and_marks_it_once(
    tmp_path: Path, settings: Settings, engine: Engine, broker: Broker
) -> None:
    seed_jobs(engine, 1)
    logs = tmp_path / "logs"
    doomed = procs.start(
        ["relay"], settings, logs, "relay-killed", OUTBOX_BRIDGE_FAULTS="relay.after_publish:KILL"
    )
    assert doomed.wait(20) == -signal.SIGKILL
    [row] = outbox_rows(engine)
    assert row.published_at is None
    assert row.publish_attempts == 0  # the holder of the relay role read the row, writing nothing
    assert broker.count() == 1  # the broker had confirmed it

    successor = procs.start(["relay"], settings, logs, "relay-successor")
    try:
        procs.wait_for(lambda: unpublished(engine) == 0, 20, what="the row published again")
    finally:
        assert successor.terminate(30) == 0
    [row] = outbox_rows(engine)
    # The role's holder counts the attempts it wrote back (the killed one wrote none).
    assert row.publish_attempts == 1
    assert [m.message_id for m in broker.take_all()] == [str(row.id), str(row.id)]
    assert "marked 1," in successor.log_path.read_text()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_stop_signal_mid_stream_exits_0_and_marks_only_what_it_published(
    tmp_path: Path, settings: Settings, engine: Engine, broker: Broker, stop: signal.Signals
) -> None:
    rows = 3000
    seed_jobs(engine, rows, spread_seconds=3.0)  # rows keep coming due while the relay runs
    relay = procs.start(["relay"], settings, tmp_path / "logs", "relay")
    try:
        procs.wait_for(lambda: unpublished(engine) < rows - 300, 20, what="publishing under way")
    finally:
        relay.signal(stop)
        code = relay.wait(30)
    assert code == 0
    after = outbox_rows(engine)
    published = {str(r.id) for r in after if r.published_at is not None}
    assert 0 < len(published) < rows
    assert published <= {m.message_id for m in broker.take_all()}
    assert "relay stopped (clean)" in relay.log_path.read_text()

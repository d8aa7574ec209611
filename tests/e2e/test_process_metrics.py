"""`/metrics` of real relay, consumer and worker processes, started with `--metrics-port` as a user starts
them: scrape, act (a job accepted and run), scrape, and the metrics that should move have moved."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, queries
from outbox_bridge.jobstore.states import State
from tests.conftest import make_settings
from tests.support import procs
from tests.support.relay_harness import Broker
from tests.support.scrape import Samples, scrape, value
from tests.support.store import new_jobs

pytestmark = [pytest.mark.broker, pytest.mark.slow]


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str) -> Settings:
    return make_settings(
        tmp_path, rabbitmq_url=rabbitmq_url, heartbeat_seconds=0.2, shutdown_grace_seconds=3.0
    )


@pytest.fixture
def broker(settings: Settings, rabbitmq_url: str) -> Iterator[Broker]:
    broker = Broker(rabbitmq_url, settings)
    yield broker
    broker.cleanup()


def _metrics(port: int) -> str:
    return f"http://127.0.0.1:{port}/metrics"


def _run(engine: Engine, count: int) -> list[str]:
    ids = new_jobs(engine, count, kind="noop")

    def done() -> bool:
        jobs = db.read(engine, lambda conn: [queries.get_job(conn, i) for i in ids])
        return all(j is not None and j.state is State.SUCCEEDED for j in jobs)

    procs.wait_for(done, 30, what=f"{count} jobs run")
    return ids


def test_relay_and_consumer_metrics_move_when_a_job_is_published_and_run(
    tmp_path: Path, settings: Settings, engine: Engine, broker: Broker
) -> None:
    logs = tmp_path / "logs"
    relay_port, consumer_port = procs.free_port(), procs.free_port()
    relay = procs.start(["relay", "--metrics-port", str(relay_port)], settings, logs, "relay")
    consumer = procs.start(
        ["consumer", "--concurrency", "2", "--metrics-port", str(consumer_port)], settings, logs, "consumer"
    )
    try:
        procs.wait_http(_metrics(relay_port), relay, timeout=30)
        procs.wait_http(_metrics(consumer_port), consumer, timeout=30)
        _run(engine, 1)  # both connected and warm
        relay_before, consumer_before = scrape(_metrics(relay_port)), scrape(_metrics(consumer_port))

        _run(engine, 3)
        relay_after, consumer_after = scrape(_metrics(relay_port)), scrape(_metrics(consumer_port))
    finally:
        assert consumer.terminate(30) == 0
        assert relay.terminate(30) == 0

    def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved(relay_before, relay_after, "outbox_bridge_relay_confirm_seconds_count") == 3
    assert moved(consumer_before, consumer_after, "outbox_bridge_deliveries_total", outcome="ran") == 3
    assert moved(consumer_before, consumer_after, "outbox_bridge_job_run_seconds_count", kind="noop") == 3
    waits = "outbox_bridge_job_accept_to_start_seconds_count"
    assert moved(consumer_before, consumer_after, waits, kind="noop") == 3
    assert moved(consumer_before, consumer_after, "outbox_bridge_store_write_seconds_count") > 0
    assert moved(consumer_before, consumer_after, "outbox_bridge_jobs", state="succeeded") == 3
    finished = {"kind": "noop", "queue": "default", "outcome": "succeeded"}
    assert moved(consumer_before, consumer_after, "outbox_bridge_jobs_finished_total", **finished) == 3
    for samples in (relay_after, consumer_after):
        assert value(samples, "outbox_bridge_processes_alive", role="relay") == 1
        assert value(samples, "outbox_bridge_processes_alive", role="consumer") == 1
    assert value(relay_after, "outbox_bridge_dead_letter_messages") == 0
    assert value(consumer_after, "outbox_bridge_jobs_in_flight") == 0


@pytest.mark.databases("sqlite")
def test_baseline_worker_metrics_count_its_runs(tmp_path: Path, settings: Settings, engine: Engine) -> None:
    port = procs.free_port()
    worker = procs.start(["worker", "--metrics-port", str(port)], settings, tmp_path / "logs", "worker")
    try:
        procs.wait_http(_metrics(port), worker, timeout=30)
        before = scrape(_metrics(port))
        _run(engine, 2)
        after = scrape(_metrics(port))
    finally:
        assert worker.terminate(30) == 0

    runs = "outbox_bridge_job_run_seconds_count"
    assert value(after, runs, kind="noop") - value(before, runs, kind="noop") == 2
    assert value(after, "outbox_bridge_processes_alive", role="worker") == 1
    assert "outbox_bridge_deliveries_total" not in {name for name, _ in after}

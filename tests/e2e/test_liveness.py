"""Who is alive, as an operator sees it: real relay and consumer processes record heartbeats, and
`outbox-bridge status --json` and `outbox-bridge healthcheck` report them and warn when waiting jobs have
nobody to run them."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, queries
from outbox_bridge.jobstore.states import State
from tests.conftest import make_settings
from tests.support import procs
from tests.support.relay_harness import Broker
from tests.support.store import new_jobs

pytestmark = [pytest.mark.broker, pytest.mark.slow]

BEAT = 0.2  # alive means seen within 3 beats: 0.6 s


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str) -> Settings:
    return make_settings(
        tmp_path,
        rabbitmq_url=rabbitmq_url,
        heartbeat_seconds=BEAT,
        shutdown_grace_seconds=3.0,
        relay_poll_seconds=0.05,
    )


@pytest.fixture
def broker(settings: Settings, rabbitmq_url: str) -> Iterator[Broker]:
    broker = Broker(rabbitmq_url, settings)
    yield broker
    broker.cleanup()


def status(settings: Settings) -> dict[str, Any]:
    done = procs.run(["status", "--json"], settings)
    document: dict[str, Any] = json.loads(done.stdout)
    assert done.returncode == (3 if document["warnings"] else 0), done.stderr  # status's exit codes
    return document


def warnings(settings: Settings) -> list[str]:
    return [w["code"] for w in status(settings)["warnings"]]


def test_status_warns_of_waiting_jobs_with_no_consumer_until_one_starts(
    tmp_path: Path, settings: Settings, engine: Engine, broker: Broker
) -> None:
    logs = tmp_path / "logs"
    relay = procs.start(["relay"], settings, logs, "relay")
    consumer: procs.Proc | None = None
    try:
        procs.wait_for(lambda: status(settings)["alive"]["relay"] == 1, 30, what="the relay's heartbeat")
        [job_id] = new_jobs(engine, 1, kind="noop")
        procs.wait_for(lambda: "no-consumer" in warnings(settings), 30, what="the no-consumer warning")
        [process] = status(settings)["processes"]
        assert (process["role"], process["pid"]) == ("relay", relay.pid)
        assert procs.run(["healthcheck", "relay"], settings).returncode == 0
        assert procs.run(["healthcheck", "consumer"], settings).returncode == 1

        consumer = procs.start(["consumer", "--concurrency", "1"], settings, logs, "consumer")
        procs.wait_for(lambda: warnings(settings) == [], 30, what="the warning gone")
        procs.wait_for(lambda: _state(engine, job_id) is State.SUCCEEDED, 30, what="the job run")
        document = status(settings)
        assert document["alive"] == {"api": 0, "relay": 1, "consumer": 1, "worker": 0}
        [seen] = [p for p in document["processes"] if p["role"] == "consumer"]
        assert seen["pid"] == consumer.pid and seen["detail"]["concurrency"] == 1

        assert consumer.terminate(30) == 0
        assert status(settings)["alive"]["consumer"] == 0, "a clean stop deletes its row at once"

        relay.signal(signal.SIGKILL)
        relay.wait(10)
        procs.wait_for(lambda: status(settings)["alive"]["relay"] == 0, 10, what="the killed relay gone")
        assert procs.run(["healthcheck", "relay"], settings).returncode == 1
    finally:
        for proc in (consumer, relay):
            if proc is not None and proc.alive():
                proc.kill()


def _state(engine: Engine, job_id: str) -> State | None:
    job = db.read(engine, queries.get_job, job_id)
    return None if job is None else job.state

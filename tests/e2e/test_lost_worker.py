"""A consumer killed while it holds jobs, as an operator sees it: a real `outbox-bridge consumer` process
claims `sleep` jobs and is SIGKILLed; `outbox-bridge status` (as a child process, on the same host) says at
once that it is lost and that its jobs' worker is lost, and exits with the warning code."""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import pytest
from sqlalchemy import Engine

from outbox_bridge.cli import WARNED
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, heartbeats, queries
from tests.conftest import make_settings
from tests.support import procs
from tests.support.relay_harness import Broker, running_relay
from tests.support.store import new_jobs

pytestmark = [pytest.mark.broker]

HELD = 4


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str) -> Settings:
    # Beats every 5 s (alive within 15 s): only the pid check can call the killed consumer lost at once.
    return make_settings(tmp_path, rabbitmq_url=rabbitmq_url, lease_seconds=30.0, relay_poll_seconds=0.05)


@pytest.fixture
def broker(settings: Settings, rabbitmq_url: str) -> Iterator[Broker]:
    broker = Broker(rabbitmq_url, settings)
    yield broker
    broker.cleanup()


def held_by(engine: Engine, owner: str) -> set[str]:
    return {j.id for j in db.read(engine, queries.running_jobs_of, [owner], limit=100)}


def reported(engine: Engine, pid: int) -> bool:
    """True once the process `pid` has beaten with the name its leases carry."""
    seen = db.read(engine, heartbeats.seen_since, 0.0)
    return any(p.pid == pid and "worker" in p.detail for p in seen)


def test_a_killed_consumer_is_lost_at_once_and_its_jobs_are_flagged(
    tmp_path: Path, settings: Settings, engine: Engine, broker: Broker, started: list[procs.Proc]
) -> None:
    jobs = set(new_jobs(engine, HELD, kind="sleep", payload={"seconds": 60}))
    with running_relay(settings, engine):
        consumer = procs.start(["consumer", "--concurrency", str(HELD)], settings, tmp_path, "consumer")
        started.append(consumer)
        name = f"consumer-{socket.gethostname()}-{consumer.pid}"
        procs.wait_for(lambda: held_by(engine, name) == jobs, 20, what="the consumer holding every job")
        procs.wait_for(lambda: reported(engine, consumer.pid), 10, what="the consumer's heartbeat")
    # No relay from here on: its sweeper would rescue the jobs of the lost consumer a few seconds on.
    os.kill(consumer.pid, signal.SIGKILL)
    consumer.wait(10)

    with ThreadPoolExecutor(2) as both:  # the two commands read the same store at once
        as_json, as_text = both.map(partial(procs.run, settings=settings), (["status", "--json"], ["status"]))

    assert as_json.returncode == WARNED, as_json.stderr
    document = json.loads(as_json.stdout)
    assert "worker-lost" in [w["code"] for w in document["warnings"]]
    assert document["alive"]["consumer"] == 0
    assert consumer.pid not in [p["pid"] for p in document["processes"]]
    [lost] = [p for p in document["lost_processes"] if p["pid"] == consumer.pid]
    assert (lost["role"], lost["condition"], lost["pid_gone"]) == ("consumer", "lost", True)
    assert lost["held_jobs"] == HELD and set(lost["jobs"]) == jobs
    flagged = {j["id"]: j for j in document["worker_lost_jobs"]}
    assert set(flagged) == jobs
    assert all(j["lease"].startswith("worker lost, lease expires in ") for j in flagged.values())

    assert as_text.returncode == WARNED, as_text.stderr
    [row] = [line for line in as_text.stdout.splitlines() if f" {consumer.pid} " in line]
    assert "lost (pid gone)" in row and "worker lost, lease expires in" in row
    assert "WARNING worker-lost:" in as_text.stdout
    for job_id in jobs:
        [job_line] = [line for line in as_text.stdout.splitlines() if job_id in line]
        assert name in job_line and "worker lost, lease expires in" in job_line

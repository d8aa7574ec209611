"""A consumer SIGKILLed while it runs a job under a long lease: the relay's sweeper learns from the process
registry that its worker is gone and queues the job again at once, so another consumer runs it long before
the lease would have run out."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, heartbeats, queries
from outbox_bridge.jobstore.states import State
from tests.conftest import make_settings
from tests.support import procs
from tests.support.relay_harness import Broker, running_relay
from tests.support.store import job_row, new_job

# The rescue's statement is held to one rule on both stores by the integration tests of the same name;
# here the processes and the registry meet once.
pytestmark = [pytest.mark.broker, pytest.mark.databases("sqlite")]

LEASE = 120.0


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str) -> Settings:
    return make_settings(
        tmp_path,
        rabbitmq_url=rabbitmq_url,
        lease_seconds=LEASE,
        heartbeat_seconds=1.0,
        relay_poll_seconds=0.05,
    )


@pytest.fixture
def broker(settings: Settings, rabbitmq_url: str) -> Iterator[Broker]:
    broker = Broker(rabbitmq_url, settings)
    yield broker
    broker.cleanup()


def owner(engine: Engine, job_id: str) -> str | None:
    return job_row(engine, job_id).lease_owner


def reported(engine: Engine, pid: int) -> bool:
    """True once the process `pid` has beaten with the name its leases carry."""
    return any(p.pid == pid and "worker" in p.detail for p in db.read(engine, heartbeats.seen_since, 0.0))


def test_a_killed_consumers_job_runs_again_on_another_long_before_its_lease_runs_out(
    tmp_path: Path, settings: Settings, engine: Engine, broker: Broker, started: list[procs.Proc]
) -> None:
    job_id = new_job(engine, kind="sleep", payload={"seconds": 3})
    with running_relay(settings, engine):
        first = procs.start(["consumer", "--concurrency", "1"], settings, tmp_path, "first")
        started.append(first)
        name = f"consumer-{socket.gethostname()}-{first.pid}"
        procs.wait_for(lambda: owner(engine, job_id) == name, 20, what="the first consumer running the job")
        procs.wait_for(lambda: reported(engine, first.pid), 10, what="the first consumer's heartbeat")
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
        second = procs.start(["consumer", "--concurrency", "1"], settings, tmp_path, "second")
        started.append(second)
        # Within a third of the lease: rescued once its worker is known gone, then run again (3 s).
        procs.wait_for(
            lambda: job_row(engine, job_id).state is State.SUCCEEDED, LEASE / 3, what="the job run again"
        )
        assert second.terminate() == 0

    attempts = db.read(engine, queries.attempts_of, job_id)
    assert [(a.worker, a.outcome, a.error_code) for a in attempts] == [
        (name, "lost", "lease_expired"),
        (f"consumer-{socket.gethostname()}-{second.pid}", "succeeded", None),
    ]

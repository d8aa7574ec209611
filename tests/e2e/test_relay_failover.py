"""Two relays as a user runs them: the one holding the relay role is SIGKILLed, and the standby takes the role
over before the killed holder's role would have expired (it learns the holder is gone: its pid on this host,
and on PostgreSQL its lock's connection), then publishes what comes due."""

from __future__ import annotations

import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore import leader as store_leader
from outbox_bridge.relay.leader import LEADER_SECONDS
from tests.conftest import make_settings
from tests.support import procs
from tests.support.relay_harness import Broker, seed_jobs, unpublished

pytestmark = pytest.mark.broker

HOLDING = "holding the relay role"


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str) -> Settings:
    return make_settings(tmp_path, rabbitmq_url=rabbitmq_url, publish_ahead=0)


@pytest.fixture
def broker(settings: Settings, rabbitmq_url: str) -> Iterator[Broker]:
    broker = Broker(rabbitmq_url, settings)
    yield broker
    broker.cleanup()


def role(engine: Engine) -> store_leader.Holder:
    found = db.read(engine, store_leader.current)
    assert found is not None
    return found


def test_a_standby_takes_the_role_of_a_killed_holder_before_the_role_expires(
    tmp_path: Path, settings: Settings, engine: Engine, broker: Broker, started: list[procs.Proc]
) -> None:
    leader = procs.start(["relay"], settings, tmp_path, "leader")
    started.append(leader)
    procs.wait_for(lambda: HOLDING in leader.log_path.read_text(), 20, what="the leader holding the role")
    standby = procs.start(["relay"], settings, tmp_path, "standby")
    started.append(standby)
    procs.wait_for(lambda: "broker connection up" in standby.log_path.read_text(), 20, what="the standby")

    before = role(engine)  # the killed holder's role lasts at least this long
    assert before.holder == f"{socket.gethostname()}:{leader.pid}"
    leader.signal(signal.SIGKILL)
    assert leader.wait(10) == -signal.SIGKILL
    procs.wait_for(lambda: HOLDING in standby.log_path.read_text(), 20, what="the standby holding the role")

    after = role(engine)
    assert after.holder == f"{socket.gethostname()}:{standby.pid}"
    assert after.expires_at - LEADER_SECONDS < before.expires_at, "taken only once the role expired"
    seed_jobs(engine, 3)
    procs.wait_for(lambda: unpublished(engine) == 0, 20, what="the new holder publishing")
    assert standby.terminate(30) == 0

"""Beyond one broker node: the chaos soak's deployment and mixed load (tests/e2e/test_soak.py) on a store of
its own on PostgreSQL and a three-node RabbitMQ cluster (scripts/rabbitmq-cluster), every process given all
three addresses. Under the load, one after the other: the node that leads the `jobs` quorum queue is killed
with SIGKILL (and started again, as its supervisor would), a second node is stopped and started, and the
PostgreSQL server is restarted without a shutdown (`-m immediate`, crash recovery at its start).

Afterwards the soak's checks hold: every 202 is a job, every job terminal within a lease, the longest
backoff and 10 s of the last fault, no job ran more executions than its attempts, at most one send per
notify job, no dead letter. The run's figures are printed and recorded: jobs accepted and finished, and
for each fault the seconds until the first publish confirm and the first job start after it, and the
longest time without either while it lasted (from `outbox.published_at` and `attempts.started_at`).

The cluster's own promises are checked on the way: the quorum queue has a replica on each node and one
leader, a new leader is elected after the kill, and stopping the cluster leaves no node running and the
node on 5672 as it was."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, select

from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.schema import attempts, outbox
from tests.conftest import FIGURE, IN_CI
from tests.e2e import test_soak
from tests.e2e.test_broker_scenarios import Stack
from tests.support import pgserver, soak
from tests.support.cluster import LocalCluster
from tests.support.cluster import missing_requirement as cluster_missing

# Four more Erlang nodes' worth of broker and a server of its own on the two cores: run alone.
# Its store is a PostgreSQL server of its own, whatever TEST_DATABASES says: it runs once.
pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.exclusive, pytest.mark.databases("sqlite")]

NAMES = {
    "queue": "cluster-jobs",
    "exchange": "cluster-jobs",
    "dead_letter_queue": "cluster-jobs.dead",
    "dead_letter_exchange": "cluster-jobs.dead",
}
SETTINGS = {**test_soak.SETTINGS, **NAMES}
# Half the soak's pace (each of the 4 clients starts a request at most every 1/15 s): the cluster's three
# nodes share the two cores with the deployment.
PACE_SECONDS = 1 / 15
SETTLE_SECONDS = 2.5  # load before the first fault, and between faults once the last one is over
TERMINAL_BOUND = test_soak.TERMINAL_BOUND


@dataclass
class Fault:
    what: str
    at: float  # epoch seconds: the kill, the stop, the restart's start
    over: float  # epoch seconds: the node booted again, the server answering again


def system_node_pid() -> str | None:
    """The OS pid of this host's own node (the one `rabbitmqctl` addresses by default), if it runs."""
    done = subprocess.run(
        ["rabbitmqctl", "status", "--formatter", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return str(json.loads(done.stdout)["pid"]) if done.returncode == 0 else None


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    reason = cluster_missing() or pgserver.missing_requirement()
    if reason:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    before = system_node_pid()
    made = LocalCluster(**NAMES)
    with made:
        yield made
    assert not made.dir.exists()
    assert made.running() == []
    assert system_node_pid() == before, "the node on 5672 was disturbed"


@pytest.fixture
def server() -> Iterator[pgserver.LocalPostgres]:
    with pgserver.LocalPostgres() as made:
        yield made


@pytest.fixture
def stack(tmp_path: Path, cluster: LocalCluster, server: pgserver.LocalPostgres) -> Iterator[Stack]:
    made = Stack(tmp_path, cluster.url, database_url=server.url, **SETTINGS)
    yield made
    made.close()


def inject_faults(cluster: LocalCluster, server: pgserver.LocalPostgres) -> list[Fault]:
    """The three faults, each after SETTLE_SECONDS of load since the one before was over."""
    faults = []
    time.sleep(SETTLE_SECONDS)
    first = cluster.leader()
    assert first is not None
    cluster.kill_node(first)
    killed = time.time()
    time.sleep(2.0)  # the node's supervisor would take a moment too
    cluster.start_node(first)
    faults.append(Fault(f"leader {first} SIGKILLed", killed, time.time()))

    time.sleep(SETTLE_SECONDS)
    leader = cluster.leader()
    second = leader if leader not in (None, first) else next(n for n in cluster.urls() if n != first)
    stopped = time.time()
    cluster.stop_node(second)
    time.sleep(1.0)
    cluster.start_node(second)
    faults.append(Fault(f"{second} stopped", stopped, time.time()))

    time.sleep(SETTLE_SECONDS)
    faults.append(Fault("PostgreSQL restarted", *server.restart()))
    time.sleep(SETTLE_SECONDS)
    return faults


def times(engine: Engine) -> tuple[list[float], list[float]]:
    """Every publish confirm the relays recorded, and every job start, in time order (epoch seconds)."""

    def read(conn: Connection) -> tuple[list[float], list[float]]:
        published = conn.scalars(select(outbox.c.published_at).where(outbox.c.published_at.isnot(None)))
        started = conn.scalars(select(attempts.c.started_at))
        return sorted(published), sorted(started)

    return db.read(engine, read)


def after(at: float, until: float, moments: list[float]) -> str:
    """The first of `moments` after `at`, and the longest time without one from `at` to `until`."""
    inside = [m for m in moments if at < m <= until]
    if not inside:
        return f"none in {until - at:.1f}s"
    gaps = [b - a for a, b in zip([at, *inside], [*inside, until], strict=True)]
    return f"first after {inside[0] - at:.2f}s, longest without {max(gaps):.2f}s"


def figures(faults: list[Fault], engine: Engine, load_ended: float) -> str:
    """Each fault's figures, from the fault to the next one (the last: to the end of the load, after which
    the quiet is the load's end, not the fault's)."""
    published, started = times(engine)
    told = []
    for fault, following in zip(faults, [*faults[1:], None], strict=True):
        until = following.at if following else load_ended
        told.append(
            f"{fault.what} (over in {fault.over - fault.at:.1f}s): publish confirms "
            f"{after(fault.at, until, published)}; job starts {after(fault.at, until, started)}"
        )
    return "; ".join(told)


@pytest.mark.timeout(240)
def test_leader_killed_node_stopped_and_store_restarted_under_load_lose_nothing_and_run_once(
    stack: Stack,
    cluster: LocalCluster,
    server: pgserver.LocalPostgres,
    record_property: pytest.RecordProperty,
) -> None:
    nodes = list(cluster.urls())
    members = cluster.members()
    assert sorted(members) == nodes and sorted(members.values()) == ["follower", "follower", "leader"]
    slots = test_soak.deploy(stack)
    clients = soak.Clients(stack.client, seed=test_soak.SEED, pace=PACE_SECONDS).start()
    try:
        faults = inject_faults(cluster, server)
        load_ended = time.time()
    finally:
        clients.stop()
        clients.join()

    problems = list(clients.failures)
    problems += [f"{s.name} exited ({s.proc.popen.poll()})" for s in slots if not s.proc.alive()]
    # The bound runs from the last fault's end, or the last 202 if that came later (monotonic seconds).
    since = max(faults[-1].over + time.monotonic() - time.time(), clients.last_accepted)
    took, seen, found = test_soak.afterwards(stack, clients, since)
    problems += found
    members = cluster.members()
    if sorted(members.values()) != ["follower", "follower", "leader"]:
        problems.append(f"the quorum queue's members at the end: {members}")

    accepted = len(clients.accepted())
    finished = sum(state not in ("queued", "running") for state in seen.states().elements())
    last = f"{took:.1f}s" if took is not None else f"not within {TERMINAL_BOUND:.1f}s"
    costs = figures(faults, stack.engine, load_ended)
    told = (
        f"cluster faults, seed {test_soak.SEED}: {accepted} jobs accepted, {finished} finished "
        f"{dict(seen.states())}; answers {dict(clients.answers)}; {costs}; "
        f"last job terminal {last} after the last fault"
    )
    print(told)
    record_property(FIGURE, told)
    assert not problems, "\n".join([told, *problems, soak.tails(stack.procs)])

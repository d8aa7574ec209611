"""`scripts/rabbitmq-cluster`: three local nodes joined in one cluster, the `jobs` quorum queue replicated on
all three, a message through a follower, and nothing left afterwards, the node on 5672 as it was."""

from __future__ import annotations

import json
import subprocess
import time

import pika
import pytest

from tests.conftest import IN_CI
from tests.support.cluster import LocalCluster, missing_requirement

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.databases("sqlite")]


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


def publish_and_get_one(url: str, queue: str, exchange: str) -> bytes | None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish(exchange, "jobs", b"through a follower", mandatory=True)
        for _ in range(50):
            method, _properties, body = channel.basic_get(queue, auto_ack=True)
            if method is not None:
                return bytes(body)
            time.sleep(0.1)
        return None
    finally:
        connection.close()


@pytest.mark.exclusive  # three more Erlang nodes on the two cores: run alone, after the others
def test_three_nodes_join_and_replicate_the_quorum_queue_on_each_and_stop_without_a_trace() -> None:
    reason = missing_requirement()
    if reason:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    before = system_node_pid()
    cluster = LocalCluster(queue="cluster-test-jobs", exchange="cluster-test-jobs")
    with cluster:
        nodes = list(cluster.urls())
        assert cluster.running() == nodes
        members = cluster.members()
        assert sorted(members) == nodes
        leader = cluster.leader()
        assert leader in nodes and sorted(members.values()) == ["follower", "follower", "leader"]
        follower = next(name for name in nodes if name != leader)
        body = publish_and_get_one(cluster.urls()[follower], cluster.queue, "cluster-test-jobs")
        assert body == b"through a follower"
        assert cluster.url.count(",") == 2
    assert not cluster.dir.exists()
    assert cluster.running() == []
    assert system_node_pid() == before

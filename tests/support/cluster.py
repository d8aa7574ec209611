"""A three-node RabbitMQ cluster on this host, for tests: `scripts/rabbitmq-cluster` as a Python object.

The nodes run as the `rabbitmq` user beside the node on 5672, which nothing here addresses. The script is
the one implementation; this only loads it and names its steps."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "rabbitmq-cluster"


def _load_script() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("rabbitmq_cluster_script", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module  # dataclasses look their module up there
    loader.exec_module(module)
    return module


script = _load_script()


def missing_requirement() -> str | None:
    """Why a cluster cannot start here, or None."""
    if shutil.which("rabbitmq-server") is None and not Path("/usr/lib/rabbitmq/bin/rabbitmq-server").exists():
        return "rabbitmq-server is missing (apt-get install rabbitmq-server)"
    if os.geteuid() != 0:
        return "starting RabbitMQ nodes as the rabbitmq user needs root"
    return None


class LocalCluster:
    """Three clustered nodes (or `nodes`) under a directory of their own (under /tmp: the `rabbitmq` user
    must reach it), with the project's topology declared under `names` (queue, exchange, ...), and the
    nodes' `consumer_timeout` and channel tick where given (milliseconds)."""

    def __init__(
        self,
        base_port: int = 5681,
        *,
        nodes: int = script.NODE_COUNT,
        consumer_timeout_ms: int | None = None,
        channel_tick_ms: int | None = None,
        **names: Any,
    ) -> None:
        base_dir = Path(tempfile.mkdtemp(prefix="rabbitmq-cluster-", dir="/tmp"))
        keys = ("queue", "exchange", "dead_letter_queue", "dead_letter_exchange", "delivery_limit")
        settings = script.topology_settings(names)
        self.cluster = script.Cluster(
            base_dir,
            base_port,
            {key: getattr(settings, key) for key in keys},
            nodes,
            consumer_timeout_ms,
            channel_tick_ms,
        )

    @property
    def dir(self) -> Path:
        return self.cluster.base_dir

    @property
    def queue(self) -> str:
        return str(self.cluster.names["queue"])

    @property
    def url(self) -> str:
        """The three AMQP URLs, comma-separated (RABBITMQ_URL)."""
        return str(self.cluster.urls)

    def log(self, node: int = 1) -> str:
        """What the node numbered `node` has logged so far."""
        found = self.cluster.nodes[node - 1]
        return "".join(path.read_text() for path in sorted((found.dir / "log").glob("*.log")))

    def urls(self) -> dict[str, str]:
        """Each node's name (`obb1@localhost`) and its AMQP URL."""
        return {node.name: node.url for node in self.cluster.nodes}

    def start(self) -> None:
        self.cluster.base_dir.mkdir(exist_ok=True)
        script.start(self.cluster)

    def stop(self) -> None:
        """Stop every node and remove the directory (after a partial start too)."""
        if (self.dir / script.STATE_FILE).exists():
            script.stop(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)

    def running(self) -> list[str]:
        registered = script.registered_nodes()
        return [node.name for node in self.cluster.nodes if node.short_name in registered]

    def members(self) -> dict[str, str]:
        """The quorum queue's members and their raft state (`leader`, `follower`)."""
        return dict(script.queue_members(self.cluster, self.queue))

    def leader(self) -> str | None:
        leader = script.leader(self.cluster, self.queue)
        return None if leader is None else str(leader)

    def kill_node(self, name: str, sig: int = signal.SIGKILL) -> None:
        script.kill_node(self.cluster.node(name), sig)

    def stop_node(self, name: str) -> None:
        script.stop_node(self.cluster.node(name))

    def start_node(self, name: str) -> None:
        script.start_node(self.cluster.node(name))

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

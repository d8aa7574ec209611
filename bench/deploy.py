"""One benchmarked deployment: a fresh store in a temporary directory and the real processes of one mode,
started through `launch.stack.Stack` and stopped (SIGTERM, then SIGKILL) when it closes.

- broker mode: `api`, `relay` and C `consumer` processes;
- sqlite mode: `api` and C `worker` processes (the SQLite-only baseline).

Broker names are unique to the run and deleted at the end."""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from types import TracebackType

import pika
from pika.exceptions import AMQPError

from outbox_bridge.broker.connection import broker_addresses, connect_first
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, migrate
from outbox_bridge.launch.stack import Service, Stack, free_port

log = logging.getLogger(__name__)

BROKER, SQLITE = "broker", "sqlite"
READY_TIMEOUT = 60.0


def run_settings(
    base: Settings, workdir: Path, *, label: str, synchronous: str, database_url: str | None
) -> Settings:
    """`base` with a store, results directory and stats directory under `workdir`, the given
    `synchronous`, and broker names of its own; a development run (OUTBOX_BRIDGE_DEV), so the api it
    starts signs with whatever AUTH_SECRET is set, the built-in one included."""
    names = f"bench-{uuid.uuid4().hex[:8]}-{label}"
    kinds = base.allowed_kinds
    if kinds is not None and "noop" not in kinds:
        kinds = (*kinds, "noop")
    return base.model_copy(
        update={
            "database_url": database_url or f"sqlite:///{workdir / 'jobs.db'}",
            "results_dir": workdir / "results",
            "notify_log": workdir / "notify-provider.jsonl",
            "execution_log": None,
            "stats_dir": workdir / "stats",
            "sqlite_synchronous": synchronous,
            "allowed_kinds": kinds,
            "exchange": names,
            "queue": names,
            "dead_letter_exchange": f"{names}.dead",
            "dead_letter_queue": f"{names}.dead",
            "outbox_bridge_dev": True,
        }
    )


def _connect(url: str) -> pika.BlockingConnection:
    """A connection to the first node of RABBITMQ_URL that answers (one attempt each, 5 s bounds)."""
    connection, _ = connect_first(broker_addresses(url, name="bench", timeout=5))
    return connection


def broker_version(url: str) -> str | None:
    try:
        connection = _connect(url)
    except AMQPError:
        return None
    try:
        version = connection._impl.server_properties.get("version")
    finally:
        connection.close()
    return version.decode() if isinstance(version, bytes) else version


class Deployment:
    """Use as a context manager: every process it started is stopped and its broker names are deleted,
    whatever happened inside."""

    def __init__(
        self,
        mode: str,
        settings: Settings,
        workdir: Path,
        *,
        processes: int,
        concurrency: int | None,
        api_workers: int = 1,
    ) -> None:
        self.mode = mode
        self.api_workers = api_workers
        self.settings = settings
        self.workdir = workdir
        self.processes = processes
        self.concurrency = concurrency
        self.stack = Stack(settings, workdir / "logs")
        self.api_url = ""
        self.started: dict[int, str] = {}  # every process ever started here, restarted ones included

    @property
    def stats_dir(self) -> Path:
        assert self.settings.stats_dir is not None
        return self.settings.stats_dir

    def start(self) -> None:
        engine = db.make_engine(self.settings)
        try:
            migrate.init_schema(self.settings, engine)
        finally:
            engine.dispose()
        port = free_port()
        self._record(self.stack.start_api(port, workers=self.api_workers))
        self.api_url = f"http://127.0.0.1:{port}"
        if self.mode == BROKER:
            self._start_broker_side()
        else:
            for i in range(1, self.processes + 1):
                self._record(self.stack.start(f"worker-{i}", "worker", *self._concurrency_args()))

    def _concurrency_args(self) -> list[str]:
        return [] if self.concurrency is None else ["--concurrency", str(self.concurrency)]

    def _start_broker_side(self, **env: str) -> None:
        self._record(self.stack.start("relay", "relay", **env))
        for i in range(1, self.processes + 1):
            self._record(self.stack.start(f"consumer-{i}", "consumer", *self._concurrency_args(), **env))
        self.wait_consumers()

    def wait_consumers(self, timeout: float = READY_TIMEOUT) -> None:
        """Wait until the queue exists and all consumer processes are subscribed to it."""
        deadline = time.monotonic() + timeout
        seen = -1
        while time.monotonic() < deadline:
            self.check_alive()
            seen = self._consumer_count()
            if seen >= self.processes:
                return
            time.sleep(0.2)
        raise RuntimeError(f"{seen} of {self.processes} consumers subscribed within {timeout:.0f}s")

    def _consumer_count(self) -> int:
        try:
            connection = _connect(self.settings.rabbitmq_url)
        except AMQPError:
            return -1
        try:
            ok = connection.channel().queue_declare(self.settings.queue, passive=True)
            return int(ok.method.consumer_count)
        except AMQPError:  # not declared yet
            return -1
        finally:
            if connection.is_open:
                connection.close()

    def reconnect_broker_side(self, rabbitmq_url: str) -> None:
        """Restart the relay and the consumers so they reach the broker at `rabbitmq_url` (a proxy)."""
        for name in ["relay", *(f"consumer-{i}" for i in range(1, self.processes + 1))]:
            self.stack.stop(name)
        self._start_broker_side(RABBITMQ_URL=rabbitmq_url)

    def check_alive(self) -> None:
        """Raise, with the log's tail, if any process has exited."""
        for service in self.stack.services.values():
            if not service.alive():
                raise RuntimeError(
                    f"{service.name} exited ({service.popen.returncode}):\n{self.tail(service.name)}"
                )

    def _record(self, service: Service) -> None:
        self.started[service.pid] = service.name

    def names(self) -> dict[int, str]:
        return dict(self.started)

    def pids(self) -> dict[str, int]:
        return {s.name: s.pid for s in self.stack.services.values() if s.alive()}

    def tail(self, name: str, chars: int = 2000) -> str:
        try:
            return self.stack.services[name].log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def tails(self) -> str:
        return "\n".join(f"--- {name}\n{self.tail(name)}" for name in self.stack.services)

    def close(self) -> None:
        try:
            self.stack.close(timeout=30)
        finally:
            if self.mode == BROKER:
                self._delete_broker_names()

    def _delete_broker_names(self) -> None:
        s = self.settings
        try:
            connection = _connect(s.rabbitmq_url)
        except AMQPError as exc:
            log.warning("could not delete the run's broker names: %s", exc)
            return
        try:
            for kind, name in [
                ("queue", s.queue),
                ("queue", s.dead_letter_queue),
                ("exchange", s.exchange),
                ("exchange", s.dead_letter_exchange),
            ]:
                channel = connection.channel()
                try:
                    channel.queue_delete(name) if kind == "queue" else channel.exchange_delete(name)
                    channel.close()
                except AMQPError:  # never declared: nothing to delete
                    pass
        finally:
            if connection.is_open:
                connection.close()

    def __enter__(self) -> Deployment:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

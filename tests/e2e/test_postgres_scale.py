"""The broker path at scale on PostgreSQL: four `outbox-bridge relay` and four `outbox-bridge consumer`
processes share one PostgreSQL store and one RabbitMQ queue and drain 5,000 jobs. Nothing crashes here, so
every outbox row must be published exactly once (read by the relay role's holder, confirmed once), every
delivery must reach exactly one consumer, every job must run once and succeed, and no deadlock or
serialization error may reach a log."""

from __future__ import annotations

import ast
import re
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pika
import pytest
from sqlalchemy import Connection, func, select, text

from outbox_bridge.broker import topology
from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, intake, migrate
from outbox_bridge.jobstore.schema import jobs, outbox
from outbox_bridge.jobstore.states import TERMINAL, State
from tests.conftest import FIGURE, make_settings
from tests.support.invariants import check_invariants
from tests.support.procs import Proc, start, wait_for

pytestmark = [pytest.mark.databases("postgresql"), pytest.mark.broker, pytest.mark.slow]

JOBS = 5_000
PER_TRANSACTION = 1_000
RELAYS = CONSUMERS = 4
DRAIN_TIMEOUT = 300.0
FORBIDDEN_IN_LOGS = ("deadlock", "serialization", "traceback")


class Fleet:
    """One store, one set of broker names, and every process started on them."""

    def __init__(self, tmp_path: Path, database_url: str, rabbitmq_url: str) -> None:
        self.settings = make_settings(
            tmp_path,
            database_url=database_url,
            rabbitmq_url=rabbitmq_url,
            degraded_after_seconds=0.0,  # deliveries are the only way to work here
            shutdown_grace_seconds=5.0,
        )
        self.engine = db.make_engine(self.settings)
        migrate.init_schema(self.settings, self.engine)
        self.logs = tmp_path / "logs"
        self.procs: list[Proc] = []
        self.ready_markers: dict[Proc, str] = {}

    def start(self, args: list[str], name: str, ready: str) -> None:
        """Start a process; `wait_ready` waits for `ready` in its log."""
        proc = start(args, self.settings, self.logs, name)
        self.procs.append(proc)
        self.ready_markers[proc] = ready

    def wait_ready(self, timeout: float) -> None:
        for proc, marker in self.ready_markers.items():
            wait_for(lambda p=proc, m=marker: m in log_of(p) or not p.alive(), timeout, what=f"{marker!r}")
            assert proc.alive(), log_of(proc)[-3000:]

    def accept(self, count: int) -> list[str]:
        ids: list[str] = []
        for _ in range(0, count, PER_TRANSACTION):
            ids += db.transact(self.engine, accept_noops, PER_TRANSACTION, clock.now())
        return ids

    def unfinished(self) -> int:
        return db.read(self.engine, count_unfinished)

    def depth(self) -> int:
        with broker(self.settings) as channel:
            return int(channel.queue_declare(self.settings.queue, passive=True).method.message_count)

    def stop_all(self) -> dict[str, int]:
        """SIGTERM every process; returns each one's exit code by log name."""
        for proc in self.procs:
            proc.signal(signal.SIGTERM)
        return {proc.log_path.stem: proc.wait(60) for proc in self.procs}

    def close(self) -> None:
        for proc in self.procs:
            if proc.alive():
                proc.kill()
        try:
            with broker(self.settings) as channel:
                topology.delete(channel, self.settings)
        finally:
            self.engine.dispose()


@contextmanager
def broker(settings: Settings) -> Iterator[Any]:
    """A channel on the test's broker, closed with its connection."""
    connection = pika.BlockingConnection(pika.URLParameters(settings.rabbitmq_url))
    try:
        yield connection.channel()
    finally:
        connection.close()


def accept_noops(conn: Connection, count: int, now: float) -> list[str]:
    return [
        intake.accept(
            conn, tenant="acme", owner="ann", kind="noop", payload={}, operation_key=intake.new_id(),
            now=now, max_attempts=3,
        ).job.id
        for _ in range(count)
    ]  # fmt: skip


def count_unfinished(conn: Connection) -> int:
    query = select(func.count()).select_from(jobs).where(jobs.c.state.not_in([s.value for s in TERMINAL]))
    return int(conn.execute(query).scalar_one())


def outbox_summary(conn: Connection) -> dict[str, Any]:
    row = conn.execute(
        select(
            func.count(),
            func.count(outbox.c.published_at),
            func.min(outbox.c.publish_attempts),
            func.max(outbox.c.publish_attempts),
            func.count(func.distinct(outbox.c.job_id)),
        )
    ).one()
    return dict(zip(("rows", "published", "min_attempts", "max_attempts", "jobs"), row, strict=True))


def drain_seconds(conn: Connection) -> float:
    first, last = conn.execute(select(func.min(jobs.c.created_at), func.max(jobs.c.finished_at))).one()
    return float(last - first)


def log_of(proc: Proc) -> str:
    return proc.log_path.read_text(errors="replace")


def consumer_counts(text: str) -> Counter[str]:
    """The counts a consumer logs when it stops: deliveries claimed or refused, outcomes committed."""
    found = re.search(r"stopped: (\{.*\})", text)
    assert found, f"no stop line in:\n{text[-2000:]}"
    return Counter(ast.literal_eval(found.group(1)))


def relay_tally(text: str) -> Counter[str]:
    """The tally a relay logs when it stops: sent, confirmed, refused, marked, stale, released."""
    found = re.search(r"relay stopped \(clean\): (.*)", text)
    assert found, f"no clean stop line in:\n{text[-2000:]}"
    return Counter({name: int(n) for name, n in (part.rsplit(" ", 1) for part in found.group(1).split(", "))})


@pytest.fixture
def fleet(tmp_path: Path, postgres_url: str, rabbitmq_url: str) -> Iterator[Fleet]:
    made = Fleet(tmp_path, postgres_url, rabbitmq_url)
    yield made
    made.close()


@pytest.mark.timeout(600)
def test_four_relays_and_four_consumers_on_postgresql_drain_5000_jobs_once_each(
    fleet: Fleet, record_property: Callable[[str, object], None]
) -> None:
    for i in range(RELAYS):
        fleet.start(["relay"], f"relay-{i}", "topology declared")
    for i in range(CONSUMERS):
        fleet.start(["consumer", "--concurrency", "4"], f"consumer-{i}", "consuming")
    fleet.wait_ready(timeout=90)
    assert_connections_named(fleet)

    started = time.monotonic()
    ids = fleet.accept(JOBS)
    wait_for(lambda: fleet.unfinished() == 0, DRAIN_TIMEOUT, interval=0.5, what=f"{JOBS} jobs finished")
    wall = time.monotonic() - started
    wait_for(lambda: fleet.depth() == 0, 30, interval=0.2, what="no delivery waiting")
    codes = fleet.stop_all()

    assert set(codes.values()) == {0}, codes
    seen = check_invariants(fleet.settings, accepted=ids, engine=fleet.engine)
    assert seen.states() == {State.SUCCEEDED.value: JOBS}
    assert all(job.epoch == 1 for job in seen.jobs.values()), "no job was claimed twice"
    assert_every_row_published_once(fleet)
    assert_every_delivery_reached_one_consumer(fleet)
    assert_logs_clean(fleet)
    drain = db.read(fleet.engine, drain_seconds)
    record_property(
        FIGURE,
        f"{JOBS} jobs, {RELAYS} relays, {CONSUMERS} consumers on PostgreSQL: {JOBS / drain:.0f} jobs/s from "
        f"the first accept to the last job finished by the store's timestamps ({drain:.1f}s; {wall:.1f}s "
        f"by the test's clock, which includes waiting for the accepts' commits)",
    )


def assert_every_row_published_once(fleet: Fleet) -> None:
    """One outbox row per job, published once and confirmed once: so says the store, so say the relays."""
    rows = db.read(fleet.engine, outbox_summary)
    assert rows == {"rows": JOBS, "published": JOBS, "min_attempts": 1, "max_attempts": 1, "jobs": JOBS}
    relays = sum((relay_tally(log_of(p)) for p in fleet.procs if p.args[0] == "relay"), Counter())
    assert (relays["sent"], relays["confirmed"], relays["marked"]) == (JOBS, JOBS, JOBS), relays
    assert relays["refused"] == relays["stale"] == relays["released"] == 0, relays


def assert_every_delivery_reached_one_consumer(fleet: Fleet) -> None:
    """The consumers together saw as many deliveries as there are rows, and none is left in the queue."""
    assert fleet.depth() == 0, "no delivery left unacked"
    consumers = [consumer_counts(log_of(p)) for p in fleet.procs if p.args[0] == "consumer"]
    delivered = sum(c["claimed"] + c["refused"] for c in consumers)
    assert delivered == JOBS, f"deliveries seen: {consumers}"
    assert all(c["claimed"] > 0 for c in consumers), f"every consumer took work: {consumers}"


def assert_connections_named(fleet: Fleet) -> None:
    """Each process's store connections carry its role and process id, for an operator to tell them apart."""
    query = text("SELECT DISTINCT application_name FROM pg_stat_activity WHERE datname = current_database()")
    with fleet.engine.connect() as conn:
        names = {str(name) for name in conn.execute(query).scalars()}
    wanted = {f"outbox-bridge:{proc.args[0]}:{proc.pid}" for proc in fleet.procs}
    assert wanted <= names, sorted(names)


def assert_logs_clean(fleet: Fleet) -> None:
    for proc in fleet.procs:
        text = log_of(proc)
        found = [word for word in FORBIDDEN_IN_LOGS if word in text.lower()]
        assert not found, f"{found} in {proc.log_path.name}:\n{text[-3000:]}"

"""`outbox-bridge consumer --concurrency N`: RabbitMQ delivery -> claim -> run -> commit -> ack.

One broker connection on its own thread (`consumer.link`), N worker threads with a claimer and a group
committer (`consumer.pipeline`), one lease keeper renewing every lease the process holds, and degraded
mode for long broker outages (`consumer.degraded`).

On SIGTERM or SIGINT: stop consuming, let running jobs finish within `shutdown_grace_seconds`, release the
rest (queued again for another worker), wait up to `max(grace, lease)` for the jobs that cannot be
released because they started an external effect, close the connection and exit 0 (1 if a job was still
running at exit).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from consumer.budget import ClaimBudget
from consumer.degraded import DegradedMode
from consumer.link import BrokerLink, Delivery
from consumer.pipeline import Pipeline
from core.settings import Settings
from jobstore import db, migrate
from worker.lease import LeaseKeeper

log = logging.getLogger(__name__)

EXIT_CLEAN, EXIT_LEFT_JOBS, EXIT_STORE_NOT_READY = 0, 1, 2


def worker_name() -> str:
    return f"consumer-{socket.gethostname()}-{os.getpid()}"


class Consumer:
    """The parts of one consumer process, started and stopped in order."""

    def __init__(self, engine: Engine, settings: Settings, *, concurrency: int) -> None:
        self.settings = settings
        name = worker_name()
        self.keeper = LeaseKeeper(engine, settings)
        budget = ClaimBudget(concurrency, settings.consumer_prefetch)
        self.link = BrokerLink(settings, budget.prefetch, self._offer)
        self.pipeline = Pipeline(
            engine, settings, self.keeper, self.link, concurrency=concurrency, worker=name, budget=budget
        )
        self.degraded = DegradedMode(
            engine, settings, self.link, self.pipeline, concurrency=concurrency, worker=name
        )

    def _offer(self, delivery: Delivery) -> None:
        self.pipeline.offer(delivery)

    def start(self) -> Consumer:
        self.keeper.start()
        self.pipeline.start()
        self.link.start()
        self.degraded.start()
        return self

    def shutdown(self) -> int:
        """Stop taking work, finish or release what is held, close. Jobs that cannot be released (an
        external effect started) get up to `max(grace, lease)` more to finish. Returns how many jobs were
        still running when it gave up (their leases run out and the sweeper settles them)."""
        grace = self.settings.shutdown_grace_seconds
        self.degraded.stop()
        self.link.stop_consuming()
        self.pipeline.stop_claiming()
        if not self.pipeline.wait_idle(grace):
            kept = self.pipeline.release_running()
            if kept:
                log.info("waiting for %d jobs that must finish (external effect started)", len(kept))
                self.pipeline.wait_idle(max(grace, self.settings.lease_seconds))
        left = self.pipeline.in_flight()
        if left:
            log.warning("%d jobs still running at exit; their leases run out, the sweeper settles them", left)
        self.pipeline.close()
        self.link.close()
        self.keeper.stop()
        log.info("stopped: %s", dict(self.pipeline.counts))
        return left


def run(settings: Settings, *, concurrency: int) -> int:
    """Run a consumer until SIGTERM or SIGINT; returns the exit code: 0 after a clean shutdown, 1 when a job
    was still running at exit, 2 when the store is not initialised (`outbox-bridge db init`) or not
    reachable."""
    logging.getLogger("pika").setLevel(
        logging.CRITICAL
    )  # pika narrates every connection; the link logs what matters
    engine = db.make_engine(settings, pool_size=concurrency + 4, max_overflow=concurrency)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        if not store_ready(engine):
            return EXIT_STORE_NOT_READY
        consumer = Consumer(engine, settings, concurrency=concurrency).start()
        log.info("consumer started: concurrency %d, queue %s", concurrency, settings.queue)
        while not stop.wait(1.0):
            pass
        log.info("stopping: finishing running jobs (grace %.1fs)", settings.shutdown_grace_seconds)
        return EXIT_CLEAN if consumer.shutdown() == 0 else EXIT_LEFT_JOBS
    finally:
        engine.dispose()


def store_ready(engine: Engine) -> bool:
    """True when the store answers at the code's schema revision; says what to do otherwise."""
    try:
        current = db.read(engine, schema_revision)
    except (db.StoreUnavailable, SQLAlchemyError) as exc:
        log.error("store not reachable: %s", exc)
        return False
    if current != migrate.head_revision():
        log.error(
            "store schema is at %s, the code needs %s: run `outbox-bridge db init` or `db upgrade`",
            current or "nothing",
            migrate.head_revision(),
        )
        return False
    return True


def schema_revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()

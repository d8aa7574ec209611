"""`outbox-bridge consumer --concurrency N`: RabbitMQ delivery -> claim -> run -> commit -> ack.

One broker connection on its own thread (`consumer.link`), N runner threads and one store writer that
claims and group-commits (`worker.writer`), one lease keeper renewing every lease the process holds, and
degraded mode for long broker outages (`consumer.degraded`).

On SIGTERM or SIGINT it stops as `worker.shutdown` says, like a baseline worker: stop consuming, let
running jobs finish within `shutdown_grace_seconds`, release the rest (queued again for another worker),
wait up to `max(grace, lease)` for the jobs that cannot be released because they started an external
effect, close the connection and exit 0 (1 if a job was still running at exit). A second signal cuts the
waiting short.
"""

from __future__ import annotations

import logging
import os
import socket
from collections import Counter
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

from outbox_bridge.consumer.degraded import DegradedMode
from outbox_bridge.consumer.link import Delivery, DeliveryLink
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.heartbeats import Heartbeat
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.telemetry import tracing
from outbox_bridge.worker.budget import ClaimBudget
from outbox_bridge.worker.heartbeat import runner_detail
from outbox_bridge.worker.lease import LeaseKeeper
from outbox_bridge.worker.metrics import serve_metrics
from outbox_bridge.worker.process import run_until_signalled
from outbox_bridge.worker.release import Release
from outbox_bridge.worker.shutdown import drain
from outbox_bridge.worker.writer import StoreWriter

log = logging.getLogger(__name__)


def worker_name() -> str:
    """The name leases are held under (reported in the heartbeat too): host and process id."""
    return f"consumer-{socket.gethostname()}-{os.getpid()}"


class Consumer:
    """The parts of one consumer process, started and stopped in order."""

    def __init__(self, engine: Engine, settings: Settings, *, concurrency: int) -> None:
        self.settings = settings
        name = worker_name()
        self.keeper = LeaseKeeper(engine, settings)
        budget = ClaimBudget(concurrency, settings.consumer_prefetch)
        self.link = DeliveryLink(settings, budget.prefetch, self._offer, self._held_past)
        self.degraded = DegradedMode(settings, self.link.down_for)
        self.writer = StoreWriter(
            engine,
            settings,
            self.keeper,
            concurrency=concurrency,
            worker=name,
            role="consumer",
            acker=self.link,
            table=self.degraded,
            budget=budget,
        )
        self._runner_detail = runner_detail(self.keeper, concurrency, name)
        self.heartbeat = Heartbeat(engine, settings, "consumer", self._detail)

    def _detail(self) -> dict[str, Any]:
        """What the consumer reports at each beat: `runner_detail`'s, and the broker node its connection is
        open to (`broker`, `host:port`; absent while there is none)."""
        node = self.link.node
        return self._runner_detail() | ({"broker": node} if node is not None else {})

    def _offer(self, delivery: Delivery) -> None:
        self.writer.offer(delivery)

    def _held_past(self, generation: int, upto: int) -> None:
        self.writer.held_past(generation, upto)

    def start(self) -> Consumer:
        self.keeper.start()
        self.writer.start()
        self.link.start()
        self.heartbeat.start()
        return self

    def shutdown(self, urgent: Callable[[], bool] = lambda: False) -> int:
        """Stop as `worker.shutdown.drain` says (cut short by `urgent()`), then close the store writer, the
        connection and the lease keeper. Returns the exit code: 0 when nothing was left running, else 1
        (such a job's lease runs out and the sweeper settles it)."""
        code = drain(self, self.settings, urgent)
        self.writer.close()
        self.link.close()
        self.keeper.stop()
        self.heartbeat.stop()
        log.info("stopped: %s; exit %d", self.writer.counts.snapshot(), code)
        return code

    # What `worker.shutdown.drain` asks of this mode.

    def stop_taking_work(self) -> None:
        self.link.stop_consuming()
        self.writer.stop_claiming()

    def wait_idle(self, timeout: float, urgent: Callable[[], bool]) -> bool:
        return self.writer.wait_idle(timeout, urgent)

    def release_held(self) -> Counter[Release]:
        return self.writer.release_held()

    def running_claims(self) -> list[Claim]:
        return [running.claim for running in self.writer.running()]


def run(settings: Settings, *, concurrency: int) -> int:
    """Run a consumer until SIGTERM or SIGINT; returns the exit code: 0 after a clean shutdown, 1 when a job
    was still running at exit, 2 when the store is not reachable or not at the code's schema revision."""
    # pika narrates every connection; the link logs what matters.
    logging.getLogger("pika").setLevel(logging.CRITICAL)
    tracing.configure("consumer")
    engine = db.make_engine(settings, "consumer", pool_size=concurrency + 4, max_overflow=concurrency)

    def start() -> Consumer:
        consumer = Consumer(engine, settings, concurrency=concurrency).start()
        serve_metrics(engine, settings, "consumer", in_flight=lambda: len(consumer.keeper.held()))
        log.info("consumer started: concurrency %d, queue %s", concurrency, settings.queue)
        return consumer

    return run_until_signalled(engine, start)

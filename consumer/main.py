"""`outbox-bridge consumer --concurrency N [--queues fast,slow=2]`: RabbitMQ delivery -> claim -> run ->
commit -> ack.

A pool of threads per group of named queues (`outbox_bridge.queues`; one pool of N threads for every queue
of the loaded kinds without `--queues`), each with its own broker connection on its own thread
(`consumer.link`), its runner threads and one store writer that claims and group-commits (`worker.writer`)
the jobs of its queues only, and degraded mode for long broker outages (`consumer.degraded`); one lease
keeper renewing every lease the process holds.

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
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Engine

from outbox_bridge.consumer.degraded import DegradedMode
from outbox_bridge.consumer.link import Delivery, DeliveryLink
from outbox_bridge.core.queue_names import DEFAULT_QUEUE
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
from outbox_bridge.worker.queues import Pool, threads
from outbox_bridge.worker.release import Release
from outbox_bridge.worker.shutdown import drain
from outbox_bridge.worker.writer import StoreWriter

log = logging.getLogger(__name__)


def worker_name() -> str:
    """The name leases are held under (reported in the heartbeat too): host and process id."""
    return f"consumer-{socket.gethostname()}-{os.getpid()}"


class ConsumerPool:
    """One pool of a consumer's threads and its named queues: a broker connection consuming their broker
    queues, with a prefetch sized to the pool's threads (`worker.budget`); a store writer that claims
    only their jobs, from deliveries or, while the broker is unreachable, from the table (`DegradedMode`)."""

    def __init__(
        self, engine: Engine, settings: Settings, keeper: LeaseKeeper, pool: Pool, worker: str
    ) -> None:
        budget = ClaimBudget(pool.threads, settings.consumer_prefetch)
        self.link = DeliveryLink(settings, budget.prefetch, self._offer, self._held_past, queues=pool.queues)
        self.degraded = DegradedMode(settings, self.link.down_for)
        self.writer = StoreWriter(
            engine, settings, keeper, concurrency=pool.threads, worker=worker, role="consumer",
            acker=self.link, table=self.degraded, budget=budget, queues=pool.claimed,
        )  # fmt: skip

    def _offer(self, delivery: Delivery) -> None:
        self.writer.offer(delivery)

    def _held_past(self, generation: int, upto: int) -> None:
        self.writer.held_past(generation, upto)


class Consumer:
    """The parts of one consumer process, started and stopped in order: by default one pool of
    `concurrency` threads for the `default` queue, else the `pools` given."""

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        *,
        concurrency: int = 0,
        pools: Sequence[Pool] | None = None,
    ) -> None:
        self.settings = settings
        name = worker_name()
        self.keeper = LeaseKeeper(engine, settings)
        pools = pools or [Pool((DEFAULT_QUEUE,), concurrency)]
        self.pools = [ConsumerPool(engine, settings, self.keeper, pool, name) for pool in pools]
        self._runner_detail = runner_detail(self.keeper, threads(pools), name)
        self.heartbeat = Heartbeat(engine, settings, "consumer", self._detail)

    def _detail(self) -> dict[str, Any]:
        """What the consumer reports at each beat: `runner_detail`'s, and the broker node a connection of
        it is open to (`broker`, `host:port`; absent while there is none)."""
        node = next((pool.link.node for pool in self.pools if pool.link.node is not None), None)
        return self._runner_detail() | ({"broker": node} if node is not None else {})

    def start(self) -> Consumer:
        self.keeper.start()
        for pool in self.pools:
            pool.writer.start()
            pool.link.start()
        self.heartbeat.start()
        return self

    def shutdown(self, urgent: Callable[[], bool] = lambda: False) -> int:
        """Stop as `worker.shutdown.drain` says (cut short by `urgent()`), then close the store writers, the
        connections and the lease keeper. Returns the exit code: 0 when nothing was left running, else 1
        (such a job's lease runs out and the sweeper settles it)."""
        code = drain(self, self.settings, urgent)
        for pool in self.pools:
            pool.writer.close()
            pool.link.close()
        self.keeper.stop()
        self.heartbeat.stop()
        counts = "; ".join(str(pool.writer.counts.snapshot()) for pool in self.pools)
        log.info("stopped: %s; exit %d", counts, code)
        return code

    # What `worker.shutdown.drain` asks of this mode.

    def stop_taking_work(self) -> None:
        for pool in self.pools:
            pool.link.stop_consuming()
            pool.writer.stop_claiming()

    def wait_idle(self, timeout: float, urgent: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + timeout
        return all(
            pool.writer.wait_idle(max(0.0, deadline - time.monotonic()), urgent) for pool in self.pools
        )

    def release_held(self) -> Counter[Release]:
        return sum((pool.writer.release_held() for pool in self.pools), Counter())

    def running_claims(self) -> list[Claim]:
        return [running.claim for pool in self.pools for running in pool.writer.running()]


def run(settings: Settings, pools: Sequence[Pool]) -> int:
    """Run a consumer of `pools` until SIGTERM or SIGINT; returns the exit code: 0 after a clean shutdown, 1
    when a job was still running at exit, 2 when the store is not reachable or not at the code's schema
    revision."""
    # pika narrates every connection; the link logs what matters.
    logging.getLogger("pika").setLevel(logging.CRITICAL)
    tracing.configure("consumer")
    every = threads(pools)
    engine = db.make_engine(settings, "consumer", pool_size=every + 3 + len(pools), max_overflow=every)

    def start() -> Consumer:
        consumer = Consumer(engine, settings, pools=pools).start()
        serve_metrics(engine, settings, "consumer", in_flight=lambda: len(consumer.keeper.held()))
        log.info("consumer started: queues %s", " ".join(map(str, pools)))
        return consumer

    return run_until_signalled(engine, start)

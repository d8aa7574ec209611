"""`outbox-bridge worker`: one process of the SQLite-only baseline.

For each pool of its threads (`outbox_bridge.queues`: one pool of `concurrency` threads for every queue of
the loaded kinds without `--queues`) it runs one store writer and the pool's runner threads
(`worker.writer`, claiming the jobs of the pool's named queues from the jobs table as
`baseline.pacing.Polling` paces it); and one lease keeper that renews every lease the process holds, and
one lease sweeper. SIGTERM or SIGINT stops it as `worker.shutdown` says, like a consumer: no new claims at
once, running jobs get `shutdown_grace_seconds` to finish, what is still held after that is released, and
the process exits 0. A job whose external effect has started cannot be released and is waited for a while
longer; if it still has not finished, the process exits 1 and the job's expired lease is settled by a
sweeper. A second signal cuts the waiting short."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from outbox_bridge.baseline.listening import Listening
from outbox_bridge.baseline.pacing import Polling
from outbox_bridge.baseline.sweep_loop import SweepLoop
from outbox_bridge.core.queue_names import DEFAULT_QUEUE
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.registry import accepted
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.heartbeats import Heartbeat
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.telemetry import tracing
from outbox_bridge.worker.heartbeat import runner_detail
from outbox_bridge.worker.lease import LeaseKeeper
from outbox_bridge.worker.metrics import serve_metrics
from outbox_bridge.worker.process import run_until_signalled
from outbox_bridge.worker.queues import Pool, threads
from outbox_bridge.worker.release import Release
from outbox_bridge.worker.shutdown import drain, listed
from outbox_bridge.worker.writer import StoreWriter

log = logging.getLogger(__name__)


def worker_name() -> str:
    """The name leases are held under: host and process id."""
    return f"baseline@{socket.gethostname()}:{os.getpid()}"


class BaselineProcess:
    """The threads of one worker process, started together and stopped in order (`worker.shutdown`): by
    default one pool of `concurrency` threads for the `default` queue, else the `pools` given, each with a
    store writer (`writers`) of its own that claims only its queues' jobs."""

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        *,
        concurrency: int = 0,
        pools: Sequence[Pool] | None = None,
    ) -> None:
        self.settings = settings
        self.stopping = threading.Event()
        self.keeper = LeaseKeeper(engine, settings)
        self.listening = Listening(settings, self._nudge, self.stopping)
        name = worker_name()
        pools = pools or [Pool((DEFAULT_QUEUE,), concurrency)]
        self.writers = [self._writer(engine, pool, name) for pool in pools]
        self.sweeper = SweepLoop(engine, settings, self.stopping)
        detail = runner_detail(self.keeper, threads(pools), name)
        self.heartbeat = Heartbeat(engine, settings, "worker", detail)

    def _writer(self, engine: Engine, pool: Pool, name: str) -> StoreWriter:
        polling = Polling(lambda: self.listening.listening)
        return StoreWriter(
            engine, self.settings, self.keeper, concurrency=pool.threads, worker=name, role="worker",
            table=polling, queues=pool.claimed,
        )  # fmt: skip

    def _nudge(self) -> None:
        for writer in self.writers:
            writer.nudge()

    def start(self) -> BaselineProcess:
        self.keeper.start()
        for writer in self.writers:
            writer.start()
        self.sweeper.start()
        self.listening.start()
        self.heartbeat.start()
        return self

    def shutdown(self, urgent: Callable[[], bool] = lambda: False) -> int:
        """Stop as `worker.shutdown.drain` says (cut short by `urgent()`), then stop the keeper and the
        sweeper. Returns the exit code: 0 when nothing was left running, else 1 (such a job's lease runs out
        and a sweeper settles it as `unknown`)."""
        code = drain(self, self.settings, urgent)
        for writer in self.writers:
            writer.close()
        self.keeper.stop()
        self.sweeper.join(timeout=1.0)
        self.listening.join(timeout=1.5)
        self.heartbeat.stop()
        counts: Counter[str] = Counter()
        for writer in self.writers:
            counts.update(writer.counts.outcomes())
        log.info("stopped: %d job(s) run (%s); exit %d", sum(counts.values()), listed(counts) or "none", code)
        return code

    # What `worker.shutdown.drain` asks of this mode.

    def stop_taking_work(self) -> None:
        self.stopping.set()
        for writer in self.writers:
            writer.stop_claiming()

    def wait_idle(self, timeout: float, urgent: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + timeout
        return all(writer.wait_idle(max(0.0, deadline - time.monotonic()), urgent) for writer in self.writers)

    def release_held(self) -> Counter[Release]:
        return sum((writer.release_held() for writer in self.writers), Counter())

    def running_claims(self) -> list[Claim]:
        return [held.claim for held in self.keeper.held() if not held.lost]


def run(settings: Settings, pools: Sequence[Pool]) -> int:
    """Run a baseline worker process of `pools` until SIGTERM or SIGINT; returns the exit code (0: clean
    stop, 1: a job was left running, 2: the store is not reachable or not at the code's schema revision)."""
    tracing.configure("worker")
    every = threads(pools)
    engine = db.make_engine(settings, "worker", pool_size=every + 2 + len(pools), max_overflow=every)

    def start() -> BaselineProcess:
        process = BaselineProcess(engine, settings, pools=pools).start()
        serve_metrics(engine, settings, "worker", in_flight=lambda: len(process.keeper.held()))
        log.info("started: %s", summary(settings, pools))
        return process

    return run_until_signalled(engine, start)


def summary(settings: Settings, pools: Sequence[Pool]) -> str:
    """The settings a worker runs with, in one line, without secrets."""
    store = make_url(settings.database_url).render_as_string(hide_password=True)
    return (
        f"queues={' '.join(map(str, pools))} store={store} synchronous={settings.sqlite_synchronous} "
        f"lease={settings.lease_seconds}s sweep_every={settings.sweep_interval_seconds}s "
        f"grace={settings.shutdown_grace_seconds}s lock_timeout={settings.store_lock_timeout_seconds}s "
        f"max_attempts={settings.max_attempts} kinds={','.join(accepted(settings))}"
    )

"""Claim, run, commit, then settle: the worker of every worker process, the consumer's and the baseline's,
made of three parts as River's is:

- the producer (`worker.producer`) decides what to claim and when: the deliveries that arrived, up to the
  room the claim budget leaves (`worker.budget`), and, while the mode's table source says so, due jobs from
  the jobs table. A consumer's jobs come as broker deliveries, and from the table only in degraded mode
  (`consumer.degraded`); the baseline's come from the table alone (`baseline.pacing.Polling`);
- the executor (`worker.runners`, running each attempt with `worker.attempt`) runs the claimed jobs on
  `concurrency` threads, keeps their leases renewed, and hands every outcome to the completer;
- the completer (`worker.completer`) runs the one store writer thread: each round commits the finished
  outcomes under their fences and writes the producer's claims in ONE transaction (a group commit); only
  after that commit are the committed and refused deliveries acked and the claimed jobs handed to the
  executor.

The modes plug in where deliveries are settled and when the table is read (`worker.modes`), and nowhere
else. The other writes of a process are few and small, and made on the threads that need them: the lease
keeper's renewals, and a running job's checkpoints and releases (runner threads).
"""

from __future__ import annotations

import queue
from collections import Counter
from collections.abc import Callable, Collection
from typing import Any

from sqlalchemy import Engine

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore.limits import Limits
from outbox_bridge.worker.budget import ClaimBudget
from outbox_bridge.worker.commit import backoff_of
from outbox_bridge.worker.completer import Completer
from outbox_bridge.worker.counts import WriterCounts
from outbox_bridge.worker.inbox import NUDGE, STOP
from outbox_bridge.worker.lease import LeasedJob, LeaseKeeper
from outbox_bridge.worker.modes import Acker, NoDeliveries, TableSource
from outbox_bridge.worker.producer import Producer
from outbox_bridge.worker.release import Release, release_all
from outbox_bridge.worker.retry import PatientStore
from outbox_bridge.worker.rounds import BrokerDelivery
from outbox_bridge.worker.runners import Runners, Running


class StoreWriter:
    """The producer, the executor and the completer of one worker process (module docstring), or of one
    of its pools of threads: with `queues`, it claims only the jobs of these named queues
    (`worker.queues`). And what the process asks of them.

    Promises: a delivery is acked only after its job's outcome is committed or its claim was refused, or
    once the store has the job under a lease that runs out (an outcome the store would not take, or a
    delivery held past `CONSUMER_DELIVERY_HOLD_SECONDS`: the sweeper gives the job back to the queue if
    this process does not finish it), or once the store has given a job held that long unclaimed a new
    outbox row; every delivery is settled at most once; no delivery goes back
    to the queue while the process keeps running (`stop_claiming` gives back what waits, for a process that
    stops); no job starts after `stop_claiming` returns. A delivery the store cannot claim at all is
    dead-lettered. Fault points `<role>.after_commit` and `<role>.after_claim` (`core.faults`) let the
    end-to-end tests kill the process at those boundaries."""

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        keeper: LeaseKeeper,
        *,
        concurrency: int,
        worker: str,
        role: str,
        acker: Acker | None = None,
        table: TableSource | None = None,
        budget: ClaimBudget | None = None,
        queues: Collection[str] | None = None,
    ) -> None:
        self._engine = engine
        self._acker: Acker = acker or NoDeliveries()
        self._worker = worker
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()  # BrokerDelivery | Finished | NUDGE | STOP
        self.counts = WriterCounts()
        limits = Limits.of(settings)
        store = PatientStore(engine, settings.lease_seconds)
        budget = budget or ClaimBudget(concurrency)
        self._runners = Runners(engine, settings, keeper, budget, self._inbox.put, concurrency=concurrency)
        self._producer = Producer(
            engine, settings, self._runners, store, self.counts, limits=limits, worker=worker, role=role,
            acker=self._acker, table=table, concurrency=concurrency, queues=queues,
        )  # fmt: skip
        self._completer = Completer(
            settings, self._inbox, self._runners, self._producer, store, self.counts,
            backoff=backoff_of(settings), limits=limits, role=role, acker=self._acker,
        )  # fmt: skip

    @property
    def worker(self) -> str:
        """The name this writer's claims write as the lease owner."""
        return self._worker

    def start(self) -> StoreWriter:
        self._runners.start()
        self._completer.start()
        return self

    def offer(self, delivery: BrokerDelivery) -> None:
        """Queue a delivery for claiming (called on the broker link's thread; never blocks)."""
        self._inbox.put(delivery)

    def nudge(self) -> None:
        """Look at the table now: a commit announced due jobs (safe from any thread)."""
        self._inbox.put(NUDGE)

    def held_past(self, generation: int, upto: int) -> None:
        """The broker link's deliveries of connection `generation` up to tag `upto` have been held past
        `CONSUMER_DELIVERY_HOLD_SECONDS`: settle them at the next turn (`Producer.held_past`). Any thread."""
        self._producer.held_past(generation, upto)
        self.nudge()

    def in_flight(self) -> int:
        """Jobs claimed here whose outcome is not committed yet."""
        return self._runners.in_flight()

    def running(self) -> list[Running]:
        return self._runners.claimed()

    def threads_alive(self) -> int:
        """How many of the writer and runner threads have not ended yet."""
        return self._completer.alive() + self._runners.alive()

    def stop_claiming(self) -> None:
        """Claim nothing more: deliveries not yet claimed go back to the queue. Waits for a round in
        progress, so no job starts running after this returns."""
        self._producer.stop()
        self.nudge()
        with self._completer.rounds:
            self._producer.requeue_waiting()

    # Shutting down.

    def wait_idle(self, timeout: float, urgent: Callable[[], bool] = lambda: False) -> bool:
        """Wait until every claimed job's outcome is committed, at most `timeout` seconds or until
        `urgent()`; False if some still run then."""
        return self._runners.wait_idle(timeout, urgent)

    def release_held(self) -> Counter[Release]:
        """Give every job still running back to the queue (`worker.release`: queued again with a new
        outbox row) and ack the delivery of each one released. Returns what became of them: a job not
        released (its external effect started, or its lease is already gone) runs on, to be finished."""
        released: list[BrokerDelivery] = []

        def forget(held: LeasedJob) -> None:
            running = self._runners.claimed_as(held.claim.attempt_id)
            if running is not None and self._runners.forget(running):
                self.counts.ended(Release.RELEASED.value)
                if running.delivery is not None:
                    released.append(running.delivery)

        handed = release_all(self._engine, [running.held for running in self.running()], forget)
        self._acker.ack(released)
        return handed

    def close(self, timeout: float = 5.0) -> None:
        """Stop the threads once the outcomes already finished are committed and acked."""
        self._runners.stop()
        self._inbox.put(STOP)
        self._completer.join(timeout)

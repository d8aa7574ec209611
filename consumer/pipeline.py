"""Claim, run, commit, then ack: the consumer's work, on threads that never touch the broker connection.

Deliveries are claimed in batches, run on a pool of worker threads, and their outcomes are group-committed:
one store writer drains every outcome that finished and every delivery that arrived meanwhile and writes
them all in one transaction (outcomes under their fences, then claims). Only after that commit are the
deliveries acked. A refused claim (finished, leased by a live worker, waiting out a backoff, waiting for
the sweeper, of a paused kind, or unknown) is acked without running: it is a duplicate, a retry whose own
outbox row delivers it later, or a job that resuming its kind announces again.

While the broker has been unreachable for long (`consumer.degraded`), a round also claims due jobs from the
jobs table, up to the room its deliveries leave, in the same transaction.

A round takes, once its transaction holds the write lock, whatever arrived while it waited for its turn.
While jobs are short, a consumer claims more jobs than it has threads (`worker.budget`), so a round
commits and claims many at a time; deliveries beyond its claim limit wait, unclaimed and unacked, for a
later round. An outcome is never held back on a timer: the writer commits what has finished as soon as it
is free, so outcomes gather into one round only while the store is busy with the round before (a group
commit, as the api's), and a finished job is visible in the store one transaction after its code returned.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol, TypeVar

from sqlalchemy import Connection, Engine

from outbox_bridge.consumer.degraded import DegradedMode
from outbox_bridge.consumer.link import Delivery
from outbox_bridge.consumer.rounds import Round, take_in_order, write_round
from outbox_bridge.core import faults
from outbox_bridge.core.backoff import Backoff, compute_backoff
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import claiming, db
from outbox_bridge.jobstore.claiming import Refusal
from outbox_bridge.jobstore.limits import Limits
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.states import State
from outbox_bridge.telemetry import instruments
from outbox_bridge.telemetry.instruments import DELIVERIES, FENCED_WRITES
from outbox_bridge.worker.attempt import discard_uncommitted
from outbox_bridge.worker.budget import AHEAD_SECONDS, ClaimBudget
from outbox_bridge.worker.inbox import STOP, take_batch, take_waiting
from outbox_bridge.worker.lease import Held, LeaseKeeper
from outbox_bridge.worker.polling import claim_due
from outbox_bridge.worker.release import Release, release_all
from outbox_bridge.worker.retry import retry_while_unavailable
from outbox_bridge.worker.runners import Finished, Runners, Running
from outbox_bridge.worker.share import TenantShare

log = logging.getLogger(__name__)

T = TypeVar("T")
# After a round the store took nothing from, its deliveries are tried again after this (doubling) pause.
RETRY_FIRST_PAUSE = 0.05
RETRY_MAX_PAUSE = 1.0
# A round's write transaction, while the store is unavailable, is tried again after this (doubling) pause.
WRITE_RETRY_PAUSES = Backoff(0.05, 1.0)
# A refused claim's delivery, as `outbox_bridge_deliveries_total` counts it.
REFUSED_AS = {
    Refusal.LEASED: instruments.LEASED_ELSEWHERE,
    Refusal.TERMINAL: instruments.ALREADY_FINISHED,
    Refusal.NOT_FOUND: instruments.NOT_FOUND,
    Refusal.NOT_AVAILABLE: instruments.NOT_DUE,
    Refusal.NEEDS_SWEEP: instruments.NEEDS_SWEEP,
    Refusal.TENANT_BUSY: instruments.TENANT_BUSY,
    Refusal.KIND_PAUSED: instruments.KIND_PAUSED,
    Refusal.HELD: instruments.HELD,
}


def _say_retrying(exc: db.StoreUnavailable, pause: float) -> None:
    log.warning("store unavailable, retrying in %.2fs: %s", pause, exc)


class Acker(Protocol):
    def ack(self, deliveries: Sequence[Delivery]) -> int: ...

    def requeue(self, deliveries: Sequence[Delivery]) -> int: ...

    def reject(self, deliveries: Sequence[Delivery]) -> int: ...


class Pipeline:
    """The store writer and the worker pool of one consumer process.

    One writer thread writes every claim and every outcome of the broker path: each round it takes every
    outcome that finished and every delivery that arrived meanwhile, commits the outcomes under their
    fences and claims the deliveries' jobs, all in ONE transaction, and only after that commit acks the
    committed and the refused deliveries and hands the claimed jobs to the workers. The process's other
    writes are few and small: the lease keeper's renewals, a running job's checkpoints and hand-backs
    (runner threads). While `degraded` mode is on (the broker gone for long), each round also claims due
    jobs from the table, up to the room its deliveries leave.

    Promises: a delivery is acked only after its job's outcome is committed or its claim was refused, or
    once the store has the job under a lease that runs out (an outcome the store would not take: the
    sweeper gives the job back to the queue with a new outbox row); every delivery is settled at most once;
    and no delivery goes back to the queue while the consumer keeps running (`stop_claiming` gives back
    what waits, for a consumer that stops). A delivery the store cannot claim at all is dead-lettered."""

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        keeper: LeaseKeeper,
        acker: Acker,
        *,
        concurrency: int,
        worker: str,
        budget: ClaimBudget | None = None,
        degraded: DegradedMode | None = None,
    ) -> None:
        self._engine = engine
        self.degraded = degraded
        self._settings = settings
        self._limits = Limits.of(settings)
        self._acker = acker
        self._worker = worker
        self._backoff = Backoff(settings.backoff_base_seconds, settings.backoff_max_seconds)
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()  # Delivery | Finished | STOP
        self._budget = budget or ClaimBudget(concurrency)
        self._runners = Runners(
            engine, settings, keeper, self._budget, self._inbox.put, concurrency=concurrency
        )
        self._share = TenantShare(settings.tenant_share, concurrency)
        self._bursting = False
        self._failed_rounds = 0  # rounds in a row the store took nothing from
        self._waiting: collections.deque[Delivery] = collections.deque()  # delivered, not claimed yet
        self._lock = threading.Lock()
        self._round = threading.Lock()
        self._accepting = True
        self.counts: Counter[str] = Counter()
        self._writer = threading.Thread(target=self._write_loop, name="store-writer", daemon=True)

    def start(self) -> Pipeline:
        self._runners.start()
        self._writer.start()
        return self

    def offer(self, delivery: Delivery) -> None:
        """Queue a delivery for claiming (called on the broker link's thread; never blocks)."""
        self._inbox.put(delivery)

    def begin(self, claim: Claim, delivery: Delivery | None) -> Running:
        """Hold the claimed job's lease and queue it for a worker thread; its run span continues the
        delivery's trace context (the stored one without a delivery)."""
        return self._runners.begin(claim, delivery, delivery.traceparent if delivery is not None else None)

    def in_flight(self) -> int:
        """Jobs claimed here whose outcome is not committed yet."""
        return self._runners.in_flight()

    def running(self) -> list[Running]:
        return self._runners.claimed()

    def stop_claiming(self) -> None:
        """Claim nothing more: deliveries not yet claimed go back to the queue. Waits for a round in
        progress, so no job starts running after this returns."""
        self._accepting = False
        with self._round:
            self._requeue_waiting()

    def _requeue_waiting(self) -> None:
        self._acker.requeue(list(self._waiting))
        self._waiting.clear()

    def _count(self, **deltas: int) -> None:
        with self._lock:
            self.counts.update(deltas)

    # Writing.

    def _write_loop(self) -> None:
        while (batch := take_batch(self._inbox, timeout=self._wait_seconds())) is not None:
            with self._round:
                finished = self._absorb(batch)
                if not self._accepting:
                    self._requeue_waiting()
                if self._runners.give_back_due:
                    self._give_back_waiting()
                from_table = self._from_table()
                room = self._room()
                from_table = from_table and room > 0
                if finished or (room > 0 and bool(self._waiting)) or from_table:
                    self._run_round(Round(finished, from_table=from_table))

    def _absorb(self, batch: list[Any]) -> list[Finished]:
        """Deliveries join the waiting ones; returns the finished outcomes."""
        self._waiting.extend(item for item in batch if isinstance(item, Delivery))
        return [item for item in batch if isinstance(item, Finished)]

    def _from_table(self) -> bool:
        """Whether the next round claims from the jobs table too (degraded mode)."""
        return self._accepting and self.degraded is not None and self.degraded.check()

    def _wait_seconds(self) -> float | None:
        """How long the writer may wait for the next item: a pause before deliveries that could be claimed
        now are tried (again), or (while claiming ahead) a moment, to notice a job that runs long; no longer
        than degraded mode's next look at the broker link or the table."""
        if self._runners.give_back_due:
            return 0.0
        if self._waiting and self._room() > 0:
            wait: float | None = compute_backoff(
                self._failed_rounds, base=RETRY_FIRST_PAUSE, cap=RETRY_MAX_PAUSE
            )
        else:
            wait = AHEAD_SECONDS if self._bursting else None
        degraded = self.degraded
        look = degraded.wait_seconds() if degraded is not None else None
        # While degraded, a full process waits for a job to finish, as it would for deliveries.
        if degraded is not None and look is not None and (not degraded.active or self._room() > 0):
            wait = look if wait is None else min(wait, look)
        return wait

    def _run_round(self, round_: Round) -> None:
        try:
            self._write_round(round_)
        except Exception:
            log.exception("a store round failed; writing its %d members one by one", round_.size)
            self._write_alone(round_)

    def _write_alone(self, round_: Round) -> None:
        """Each member of a failed round in a transaction of its own, so that one the store cannot take
        never fails the others."""
        if round_.size == 1:
            self._give_up(round_)
            return
        for finished in round_.finished:
            self._run_round(Round([finished], topped_up=True))
        for delivery in round_.deliveries:
            self._run_round(Round([], [delivery], topped_up=True))
        if round_.from_table and self.degraded is not None:
            self.degraded.took(0)  # what the table held is looked for again after the idle pause

    def _give_up(self, round_: Round) -> None:
        """A member the store fails to take even alone. Its outcome is acked and its job left to its lease
        (the sweeper settles it); its delivery is dead-lettered (the relay's dead-letter check settles it
        from the store)."""
        for finished in round_.finished:
            log.error(
                "job %s: the store refused its outcome; its lease will run out", finished.running.claim.job_id
            )
        self._end(round_.finished)
        for delivery in round_.deliveries:
            log.error("job %s: the store cannot claim it; dead-lettering its delivery", delivery.job_id)
        self._acker.reject(round_.deliveries)
        DELIVERIES.labels(instruments.DEAD_LETTERED).inc(len(round_.deliveries))

    def _room(self) -> int:
        """How many more jobs this consumer may claim now, starting or stopping claiming ahead as the
        budget says. Deliveries beyond the room wait here, unacked, for a later round."""
        room = self._runners.room()
        self._bursting = self._runners.bursting and self._accepting
        return room

    def _give_back_waiting(self) -> None:
        """Claiming ahead stopped (a job runs long): the jobs claimed here that still wait for a thread go
        back to the store (`Runners.give_back_waiting`), so a consumer with a thread free runs them (the
        relay publishes them again). Their deliveries wait here, unclaimed, with the others: claimed again
        here in their order if no other consumer got to one first, else refused and acked.

        Only where order matters: when what this consumer holds (claimed or not) is all of one priority and
        one tenant, no job waits behind another's, and giving back would only claim the same jobs again."""
        if not self._accepting or not self._several_orders():
            self._runners.give_back_due = False
            return
        released = self._runners.give_back_waiting()
        self._waiting.extend(running.delivery for running in released if running.delivery is not None)
        self._count(shed=len(released))

    def _several_orders(self) -> bool:
        held = [*self._waiting, *(r.delivery for r in self._runners.claimed() if r.delivery is not None)]
        return len({(delivery.priority, delivery.tenant) for delivery in held}) > 1

    def _in_transaction(self, conn: Connection, round_: Round) -> Any:
        """The round's transaction, once it holds the write lock: first take what arrived while it waited
        for its turn (once: a rerun writes the same round), then write it."""
        if not round_.topped_up:
            round_.topped_up = True
            round_.finished += self._absorb(take_waiting(self._inbox))
            room = self._room()
            claimed = self._runners.claimed()
            running = Counter(held.claim.tenant for held in claimed)
            wanted = room and (self._waiting or round_.from_table)
            round_.share = self._share.held(conn, running, self._bursting) if wanted else None
            most = round_.share.most if round_.share else None
            round_.deliveries = take_in_order(self._waiting, room, running, most)
            round_.table_room = room - len(round_.deliveries) if round_.from_table else 0
        job_ids = [d.job_id for d in round_.deliveries]
        lease = self._settings.lease_seconds
        cap = self._settings.tenant_max_running
        states, claims = write_round(
            conn, round_.finished, job_ids, self._worker, lease, self._backoff, cap, self._limits
        )
        table: list[Claim] = []
        if round_.table_room > 0:
            table = claim_due(conn, self._worker, lease, round_.table_room, cap, round_.share, self._limits)
        return states, claims, table

    def _write_round(self, round_: Round) -> None:
        written = self._patiently(self._in_transaction, round_)
        if written is None:
            log.error("the store took nothing for a lease's length; outcomes are left to their leases")
            self._failed_rounds += 1
            self._end(round_.finished)
            self._waiting.extendleft(reversed(round_.deliveries))  # tried again in the next round
            if round_.from_table and self.degraded is not None:
                self.degraded.took(0)
            return
        self._failed_rounds = 0
        states, claims, table = written
        if round_.finished:
            faults.hit("consumer.after_commit")
            self._committed(round_.finished, states)
        self._claimed(round_.deliveries, claims)
        if round_.from_table:
            self._claimed_from_table(table)

    def _committed(self, finished: list[Finished], states: list[State | None]) -> None:
        fenced = sum(state is None for state in states)
        self._count(commit_rounds=1, committed=len(finished) - fenced, fenced=fenced)
        FENCED_WRITES.inc(fenced)
        if fenced:
            log.info("%d of %d outcomes fenced out (a newer epoch or an expired lease)", fenced, len(states))
        self._end(finished)
        for f, state in zip(finished, states, strict=True):
            discard_uncommitted(self._settings, f.running.claim, f.outcome, state)

    def _claimed(self, deliveries: list[Delivery], claims: list[claiming.ClaimResult]) -> None:
        refused = []
        for delivery, result in zip(deliveries, claims, strict=True):
            if result.claim is None:
                assert result.refusal is not None
                log.info("job %s not run (%s): delivery acked", delivery.job_id, result.refusal.value)
                refused.append(delivery)
                DELIVERIES.labels(REFUSED_AS[result.refusal]).inc()
                continue
            DELIVERIES.labels(instruments.RAN).inc()
            faults.hit("consumer.after_claim")
            self.begin(result.claim, delivery)
        if deliveries:
            self._count(claim_rounds=1, claimed=len(deliveries) - len(refused), refused=len(refused))
        self._acker.ack(refused)

    def _claimed_from_table(self, claims: list[Claim]) -> None:
        """Degraded mode's claims: run without a delivery (the run continues the stored trace context)."""
        for claim in claims:
            faults.hit("consumer.after_claim")
            self.begin(claim, None)
        assert self.degraded is not None
        self.degraded.took(len(claims))

    def _end(self, finished: Sequence[Finished]) -> None:
        """Forget the jobs and ack their deliveries: the store has each outcome, or the job under a lease
        that is no longer renewed."""
        deliveries = [f.running.delivery for f in finished if self._runners.forget(f.running)]
        self._acker.ack([d for d in deliveries if d is not None])

    def _patiently(self, fn: Callable[..., T], *args: Any) -> T | None:
        """One write transaction, retried while the store is unavailable for up to a lease's length;
        None if it never went through."""
        try:
            return retry_while_unavailable(
                partial(db.transact, self._engine, fn, *args),
                give_up_after=self._settings.lease_seconds,
                pauses=WRITE_RETRY_PAUSES,
                on_retry=_say_retrying,
            )
        except db.StoreUnavailable as exc:
            log.error("store unavailable, giving up: %s", exc)
            return None

    # Shutting down.

    def wait_idle(self, timeout: float, urgent: Callable[[], bool] = lambda: False) -> bool:
        """Wait until every claimed job's outcome is committed, at most `timeout` seconds or until
        `urgent()`; False if some still run then."""
        return self._runners.wait_idle(timeout, urgent)

    def release_held(self) -> Counter[Release]:
        """Give every job still running back to the queue (`worker.release`: queued again with a new
        outbox row) and ack the delivery of each one released. Returns what became of them: a job not
        released (its external effect started, or its lease is already gone) runs on, to be finished."""
        released: list[Delivery] = []

        def forget(held: Held) -> None:
            running = self._runners.claimed_as(held.claim.attempt_id)
            if running is not None and self._runners.forget(running) and running.delivery is not None:
                released.append(running.delivery)

        handed = release_all(self._engine, [running.held for running in self.running()], forget)
        self._acker.ack(released)
        return handed

    def close(self, timeout: float = 5.0) -> None:
        """Stop the threads once the outcomes already finished are committed and acked."""
        self._runners.stop()
        self._inbox.put(STOP)
        self._writer.join(timeout)

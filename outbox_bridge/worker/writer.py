"""Claim, run, commit, then settle: the one claim-and-commit loop of every worker process, the consumer's
and the baseline's, on a thread that never touches the broker connection.

One store writer thread writes every claim and every outcome of its process. Each round it takes every
outcome that finished and every delivery that arrived meanwhile, commits the outcomes under their fences,
claims the delivered jobs and, while its table source says so, due jobs from the jobs table up to the room
its deliveries leave, all in ONE transaction; only after that commit does it ack the committed and refused
deliveries and hand the claimed jobs to the runner threads (`worker.runners`). A consumer's jobs come as
broker deliveries, and from the table only in degraded mode (`consumer.degraded`); the baseline's come from
the table alone (`baseline.pacing.Polling`). A refused claim (finished, leased by a live worker, waiting out a
backoff, waiting for the sweeper, of a paused kind, or unknown) is acked without running: it is a duplicate,
a retry whose own outbox row delivers it later, or a job that resuming its kind announces again.

A round takes, once its transaction holds the write lock, whatever arrived while it waited for it.
While jobs are short, a process claims more jobs than it has threads (`worker.budget`), so a round commits
and claims many at a time; deliveries beyond its claim limit wait, unclaimed and unacked, for a later
round. An outcome is never held back on a timer: the writer commits what has finished as soon as it is
free, so outcomes gather into one round only while the store is busy with the round before (a group
commit, as the api's), and a finished job is visible in the store one transaction after its code returned.

A round the store cannot take (unavailable, busy past its timeout) is tried again, pausing 50 ms doubling
to 1 s, for up to a lease's length; the first try of such a streak says so in the log, and so does the
first that goes through. Past a lease's length its outcomes are left to their leases (the sweeper settles
them; a late write would be fenced anyway).

The other writes of a process are few and small, and made on the threads that need them: the lease
keeper's renewals, and a running job's checkpoints and releases (runner threads).
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

from outbox_bridge.core import clock, faults
from outbox_bridge.core.backoff import Backoff, compute_backoff
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import claiming, db, sweeper
from outbox_bridge.jobstore.claiming import Refusal
from outbox_bridge.jobstore.limits import Limits
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.states import State
from outbox_bridge.telemetry import instruments
from outbox_bridge.telemetry.instruments import DELIVERIES, FENCED_WRITES
from outbox_bridge.worker.attempt import discard_uncommitted
from outbox_bridge.worker.budget import AHEAD_SECONDS, ClaimBudget
from outbox_bridge.worker.inbox import STOP, held_past, take_batch, take_held, take_waiting
from outbox_bridge.worker.lease import Held, LeaseKeeper
from outbox_bridge.worker.polling import any_due
from outbox_bridge.worker.release import Release, release_all
from outbox_bridge.worker.retry import retry_while_unavailable
from outbox_bridge.worker.rounds import Delivery, Round, take_in_order, write_round
from outbox_bridge.worker.runners import Finished, Runners, Running
from outbox_bridge.worker.share import TenantShare

log = logging.getLogger(__name__)

T = TypeVar("T")
# After a round the store took nothing from, its deliveries are tried again after this (doubling) pause.
RETRY_FIRST_PAUSE = 0.05
RETRY_MAX_PAUSE = 1.0
# A round's write transaction, while the store is unavailable, is tried again after this (doubling) pause.
WRITE_RETRY_PAUSES = Backoff(0.05, 1.0)
# While the store stays unavailable, the log says so again every this many tries.
UNAVAILABLE_LOG_EVERY = 100
# Put by `StoreWriter.nudge`: look at the table now (a commit announced due jobs, or the process stops).
NUDGE: Any = object()
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


class Acker(Protocol):
    """Where deliveries are settled (the consumer's broker link, which takes back its own deliveries)."""

    def ack(self, deliveries: Sequence[Any]) -> int: ...

    def requeue(self, deliveries: Sequence[Any]) -> int: ...

    def reject(self, deliveries: Sequence[Any]) -> int: ...


class NoDeliveries:
    """The `Acker` of a process whose jobs all come from the table: there is never a delivery to settle."""

    def ack(self, deliveries: Sequence[Any]) -> int:
        return 0

    requeue = reject = ack


class TableSource(Protocol):
    """When a process claims due jobs from the jobs table, and how often it looks."""

    @property
    def active(self) -> bool:
        """Whether the last `check` said to claim from the table."""
        ...

    @property
    def reads_first(self) -> bool:
        """Whether a round that only looks at the table (woken by its pause, with nothing else to write)
        first reads whether any job is due, and takes the write lock only if one is."""
        ...

    def check(self) -> bool:
        """Whether the next round claims from the table."""
        ...

    def took(self, count: int, room: int) -> None:
        """A round that claimed from the table with `room` claimed `count` jobs there."""
        ...

    def wait_seconds(self) -> float | None:
        """How long the writer may wait for other work before it looks at the table again (None: it need
        not look until something else wakes it)."""
        ...


class WriterCounts:
    """What one writer did, safe to read from any thread: rounds, claims, refusals and jobs given back
    (`add`), and what became of each job it ran (`outcomes`: a state's name, `fenced` or `released`)."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._outcomes: Counter[str] = Counter()
        self._lock = threading.Lock()

    def add(self, **deltas: int) -> None:
        with self._lock:
            self._counts.update(deltas)

    def ended(self, outcome: str) -> None:
        with self._lock:
            self._outcomes[outcome] += 1

    def __getitem__(self, name: str) -> int:
        with self._lock:
            return self._counts[name]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._counts.items()))

    def outcomes(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._outcomes.items()))


class _Unavailable:
    """A streak of tries that found the store unavailable, said in the log at its first try, every so often
    after it (a removed store file fails every try at once), and once when the store answers again."""

    def __init__(self) -> None:
        self.tries = 0

    def failed(self, exc: db.StoreUnavailable, pause: float = 0.0) -> None:
        self.tries += 1
        if self.tries == 1 or self.tries % UNAVAILABLE_LOG_EVERY == 0:
            log.warning(
                "store unavailable, pausing claims (%d tries in a row, next in %.2fs): %s",
                self.tries,
                pause,
                exc,
            )

    def answered(self) -> None:
        if self.tries:
            log.info("the store answers again after %d tries", self.tries)
            self.tries = 0


class StoreWriter:
    """The store writer and the runner threads of one worker process (module docstring).

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
    ) -> None:
        self._engine = engine
        self.table = table
        self._settings = settings
        self._limits = Limits.of(settings)
        self._acker: Acker = acker or NoDeliveries()
        self._worker = worker
        self._role = role
        self._backoff = Backoff(settings.backoff_base_seconds, settings.backoff_max_seconds)
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()  # Delivery | Finished | NUDGE | STOP
        self._budget = budget or ClaimBudget(concurrency)
        self._runners = Runners(
            engine, settings, keeper, self._budget, self._inbox.put, concurrency=concurrency
        )
        self._share = TenantShare(settings.tenant_share, concurrency)
        self._bursting = False
        self._failed_rounds = 0  # rounds in a row the store took nothing from
        self._unavailable = _Unavailable()
        self._waiting: collections.deque[Delivery] = collections.deque()  # delivered, not claimed yet
        self._round = threading.Lock()
        self._accepting = True
        self._held_past: tuple[int, int] | None = None  # (generation, tag): `held_past`
        self._acked_early: set[Delivery] = set()  # of claimed jobs, by `_settle_held`
        self.counts = WriterCounts()
        self._writer = threading.Thread(target=self._write_loop, name="store-writer", daemon=True)

    @property
    def worker(self) -> str:
        """The name this writer's claims write as the lease owner."""
        return self._worker

    def start(self) -> StoreWriter:
        self._runners.start()
        self._writer.start()
        return self

    def offer(self, delivery: Delivery) -> None:
        """Queue a delivery for claiming (called on the broker link's thread; never blocks)."""
        self._inbox.put(delivery)

    def nudge(self) -> None:
        """Look at the table now: a commit announced due jobs (safe from any thread)."""
        self._inbox.put(NUDGE)

    def held_past(self, generation: int, upto: int) -> None:
        """The broker link's deliveries of connection `generation` up to tag `upto` have been held past
        `CONSUMER_DELIVERY_HOLD_SECONDS`: settle them at the next turn (`_settle_held`). Any thread."""
        self._held_past = (generation, upto)
        self.nudge()

    def begin(self, claim: Claim, delivery: Delivery | None, *, ahead: bool = False) -> Running:
        """Hold the claimed job's lease and queue it for a runner thread; its run span continues the
        delivery's trace context (the stored one without a delivery). `ahead`: claimed ahead of a thread."""
        traceparent = delivery.traceparent if delivery is not None else None
        return self._runners.begin(claim, delivery, traceparent, ahead=ahead)

    def in_flight(self) -> int:
        """Jobs claimed here whose outcome is not committed yet."""
        return self._runners.in_flight()

    def running(self) -> list[Running]:
        return self._runners.claimed()

    def threads_alive(self) -> int:
        """How many of the writer and runner threads have not ended yet."""
        return self._writer.is_alive() + self._runners.alive()

    def stop_claiming(self) -> None:
        """Claim nothing more: deliveries not yet claimed go back to the queue. Waits for a round in
        progress, so no job starts running after this returns."""
        self._accepting = False
        self.nudge()
        with self._round:
            self._requeue_waiting()

    def _requeue_waiting(self) -> None:
        self._acker.requeue(list(self._waiting))
        self._waiting.clear()

    # Writing.

    def _write_loop(self) -> None:
        while (batch := take_batch(self._inbox, timeout=self._wait_seconds())) is not None:
            with self._round:
                finished = self._absorb(batch)
                if self._held_past is not None:
                    self._settle_held()
                if not self._accepting:
                    self._requeue_waiting()
                if self._runners.give_back_due:
                    self._give_back_waiting()
                self._give_back_over_share()
                room = self._room()
                from_table = self._from_table() and room > 0
                if from_table and not batch and not finished and not self._waiting and not self._any_due():
                    continue  # woken by its pause alone, and the table has nothing due
                marks = self._runners.began_running(AHEAD_SECONDS)
                if finished or (room > 0 and bool(self._waiting)) or from_table or marks:
                    self._run_round(Round(finished, from_table=from_table, marks=marks))

    def _absorb(self, batch: list[Any]) -> list[Finished]:
        """Deliveries join the waiting ones; returns the finished outcomes (a nudge only wakes the loop)."""
        finished = [item for item in batch if isinstance(item, Finished)]
        if len(finished) < len(batch):
            delivered = [item for item in batch if not isinstance(item, Finished) and item is not NUDGE]
            self._waiting.extend(delivered)
            self._share.saw(delivery.tenant for delivery in delivered)
        return finished

    def _settle_held(self) -> None:
        """Settle the deliveries held past the hold, before the broker's `consumer_timeout` closes their
        channel, and never by giving them back to the queue (each return counts toward the message's
        delivery limit). A claimed job's delivery is acked: the store keeps the job safe (its lease, then the
        sweeper), and the ack its outcome would have sent is dropped by the link. A delivery still waiting to
        be claimed is acked once the store has given its job a new outbox row where it needs one (as for a
        dead letter: a queued job with none waiting to be published), so the relay delivers it again; while
        the store cannot take that, it waits on, and the link says so again."""
        assert self._held_past is not None
        generation, upto = self._held_past
        self._held_past = None
        held = {r.delivery for r in self._runners.claimed() if r.delivery is not None}
        self._acked_early &= held
        claimed = [d for d in held - self._acked_early if held_past(d, generation, upto)]
        self._acked_early.update(claimed)
        waiting = take_held(self._waiting, generation, upto)
        job_ids = [delivery.job_id for delivery in waiting]
        if waiting and self._patiently(sweeper.settle_dead_letters, job_ids, clock.now()) is None:
            self._waiting.extendleft(reversed(waiting))
            waiting = []
        self._acker.ack([*claimed, *waiting])
        self.counts.add(acked_early=len(claimed), announced_again=len(waiting))
        log.info(
            "deliveries held past %.0fs acked: %d of claimed jobs, %d of jobs announced again",
            self._settings.consumer_delivery_hold_seconds,
            len(claimed),
            len(waiting),
        )

    def _from_table(self) -> bool:
        """Whether the next round claims from the jobs table too."""
        return self._accepting and self.table is not None and self.table.check()

    def _any_due(self) -> bool:
        """Before a round its pause alone started (`TableSource.reads_first`): whether any job is due, read
        without the write lock. Most such looks find nothing, and on SQLite every writer of the host would
        wait behind an empty write transaction. A store that cannot be read counts as an empty look; any
        other error leaves the decision to the round."""
        assert self.table is not None
        if not self.table.reads_first:
            return True
        try:
            due = db.read(self._engine, self._any_due_in)
        except db.StoreUnavailable as exc:
            self.table.took(0, self._room())
            self._unavailable.failed(exc, self.table.wait_seconds() or 0.0)
            return False
        except Exception:  # a bug must not cost the process its writer: the round decides
            log.exception("unexpected error reading whether any job is due")
            return True
        self._unavailable.answered()
        if not due:
            self.table.took(0, self._room())
        return due

    def _any_due_in(self, conn: Connection) -> bool:
        held, waiting = Counter(self._runners.tenants()), self._waiting_tenants()
        share = self._share.bound(conn, held, waiting, self._room(), table=True)
        return any_due(conn, self._settings.tenant_max_running, share, self._limits)

    def _wait_seconds(self) -> float | None:
        """How long the writer may wait for the next item: a pause before deliveries that could be claimed
        now are tried (again), or (while claiming ahead and holding jobs) a moment, to notice a job that runs
        long; no longer than the table source's next look, unless every room is taken (then it waits for a
        job to finish, as it would for deliveries). A writer that holds no job waits for work: none can run
        long, and each wake-up costs an idle process its CPU."""
        if self._runners.give_back_due:
            return 0.0
        if self._waiting and self._room() > 0:
            wait: float | None = compute_backoff(
                self._failed_rounds, base=RETRY_FIRST_PAUSE, cap=RETRY_MAX_PAUSE
            )
        else:
            wait = AHEAD_SECONDS if self._bursting and self._runners.in_flight() else None
        if self._runners.unmarked():  # a job claimed ahead the store shows waiting: look when it starts
            wait = AHEAD_SECONDS if wait is None else min(wait, AHEAD_SECONDS)
        table = self.table
        look = table.wait_seconds() if table is not None and self._accepting else None
        if table is not None and look is not None and (not table.active or self._room() > 0):
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
        if round_.from_table and self.table is not None:
            self.table.took(0, round_.table_room)  # what the table held is looked for again after its pause

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
        """How many more jobs this process may claim now, starting or stopping claiming ahead as the
        budget says. Deliveries beyond the room wait here, unacked, for a later round."""
        room = self._runners.room() if self._accepting else 0
        self._bursting = self._runners.bursting and self._accepting
        return room

    def _give_back_waiting(self) -> None:
        """Claiming ahead stopped (a job runs long): the jobs claimed here that still wait for a thread go
        back to the store (`Runners.give_back_waiting`), so a process with a thread free runs them (queued
        again, the relay publishes them again). Their deliveries wait here, unclaimed, with the others:
        claimed again here in their order if no other process got to one first, else refused and acked.

        Only where order matters or the table holds it: when this process holds deliveries alone, all of
        one priority and one tenant, no job waits behind another's, and giving back would only claim the
        same jobs again."""
        if not self._accepting or not self._several_orders():
            self._runners.give_back_due = False
            return
        released = self._runners.give_back_waiting()
        self._waiting.extend(running.delivery for running in released if running.delivery is not None)
        self.counts.add(shed=len(released))

    def _give_back_over_share(self) -> None:
        """`TENANT_SHARE` (`worker.share`): while another tenant has work, the jobs a tenant holds claimed
        here past its most that still wait for a thread go back to the store (`Runners.give_back_over`),
        as `_give_back_waiting` gives them back, so that the threads they would take next go to the other
        tenant's jobs. Looks at the store (a read) only while a tenant holds jobs past its most that wait."""
        most = self._share.most
        if not self._accepting or not self._runners.waiting_over(most):
            return
        known = self._share.known(self._waiting_tenants())
        if len(known) < 2:
            if self._share.alone(known):
                return
            try:
                if not db.read(self._engine, self._share.others_due, known):
                    return
            except db.StoreUnavailable:
                return  # the round that follows finds out, and the next look tries again
        released = self._runners.give_back_over(most)
        self._waiting.extend(running.delivery for running in released if running.delivery is not None)
        self.counts.add(shed=len(released))

    def _waiting_tenants(self) -> Counter[str]:
        return Counter(delivery.tenant for delivery in self._waiting)

    def _several_orders(self) -> bool:
        claimed = self._runners.claimed()
        if any(running.delivery is None for running in claimed):
            return True  # claimed from the table: any process with a thread free claims it there, in order
        held = [*self._waiting, *(running.delivery for running in claimed)]
        return len({(delivery.priority, delivery.tenant) for delivery in held}) > 1

    def _in_transaction(self, conn: Connection, round_: Round) -> Any:
        """The round's transaction, once it holds the write lock: first take what arrived while it waited
        for it (once: a rerun writes the same round), then write it."""
        if not round_.topped_up:
            round_.topped_up = True
            round_.finished += self._absorb(take_waiting(self._inbox))
            room = self._room()
            running = Counter(self._runners.tenants())
            wanted = room and (self._waiting or round_.from_table)
            waiting, from_table = self._waiting_tenants(), round_.from_table
            round_.share = self._share.bound(conn, running, waiting, room, from_table) if wanted else None
            most = round_.share.most if round_.share else None
            round_.deliveries = take_in_order(self._waiting, room, running, most)
            round_.held_back = most is not None and not round_.deliveries and bool(self._waiting)
            round_.table_room = room - len(round_.deliveries) if round_.from_table else 0
            round_.free = self._runners.idle()
        job_ids = [d.job_id for d in round_.deliveries]
        lease = self._settings.lease_seconds
        cap = self._settings.tenant_max_running
        free = round_.free
        states, claims = write_round(
            conn, round_.finished, job_ids, self._worker, lease, self._backoff, cap, self._limits, free
        )
        table: list[Claim] = []
        if round_.table_room > 0:
            round_.table_ahead = free is not None and round_.table_room > free - len(job_ids)
            table = claiming.claim_due(
                conn, self._worker, clock.now(), lease, round_.table_room, tenant_cap=cap,
                share=round_.share, limits=self._limits, ahead=round_.table_ahead,
            )  # fmt: skip
        claiming.mark_running(
            conn, [(r.claim.job_id, r.claim.epoch, r.began_at or 0.0) for r in round_.marks]
        )
        return states, claims, table

    def _write_round(self, round_: Round) -> None:
        written = self._patiently(self._in_transaction, round_)
        if written is None:
            log.error("the store took nothing for a lease's length; outcomes are left to their leases")
            self._failed_rounds += 1
            self._end(round_.finished)
            self._waiting.extendleft(reversed(round_.deliveries))  # tried again in the next round
            if round_.from_table and self.table is not None:
                self.table.took(0, round_.table_room)
            return
        # A round the share let take no delivery is tried again after a growing pause, as a failed one:
        # what frees room (a job that ends, another tenant's delivery) wakes the writer anyway.
        self._failed_rounds = self._failed_rounds + 1 if round_.held_back else 0
        states, claims, table = written
        if round_.finished:
            faults.hit(f"{self._role}.after_commit")
            self._committed(round_.finished, states)
        self._runners.marked(round_.marks)
        ahead = round_.free is not None and round_.free < len(claims)
        self._claimed(round_.deliveries, claims, ahead)
        if round_.from_table and self.table is not None:
            self._claimed_from_table(table, round_.table_ahead)
            self.table.took(len(table), round_.table_room)

    def _committed(self, finished: list[Finished], states: list[State | None]) -> None:
        fenced = sum(state is None for state in states)
        self.counts.add(commit_rounds=1, committed=len(finished) - fenced, fenced=fenced)
        FENCED_WRITES.inc(fenced)
        if fenced:
            log.info("%d of %d outcomes fenced out (a newer epoch or an expired lease)", fenced, len(states))
        held = self._end(finished)
        for f, state, ours in zip(finished, states, held, strict=True):
            discard_uncommitted(self._settings, f.running.claim, f.outcome, state)
            if ours:  # (a released job was counted as it was released)
                self.counts.ended(_outcome_name(f.running.held, state))

    def _claimed(self, deliveries: list[Delivery], claims: list[claiming.ClaimResult], ahead: bool) -> None:
        """Begin the claimed jobs (claimed as started at once, or all `ahead` of a thread: `write_round`);
        ack the refused ones."""
        refused = []
        for delivery, result in zip(deliveries, claims, strict=True):
            if result.claim is None:
                assert result.refusal is not None
                log.info("job %s not run (%s): delivery acked", delivery.job_id, result.refusal.value)
                refused.append(delivery)
                DELIVERIES.labels(REFUSED_AS[result.refusal]).inc()
                continue
            DELIVERIES.labels(instruments.RAN).inc()
            faults.hit(f"{self._role}.after_claim")
            self.begin(result.claim, delivery, ahead=ahead)
        if deliveries:
            self.counts.add(claim_rounds=1, claimed=len(deliveries) - len(refused), refused=len(refused))
        self._acker.ack(refused)

    def _claimed_from_table(self, claims: list[Claim], ahead: bool) -> None:
        """Claims from the table: run without a delivery (the run continues the stored trace context). They
        were claimed as started at once when the threads free could take all it might claim, else all as
        claimed ahead (`ahead`)."""
        self._share.saw(claim.tenant for claim in claims)
        for claim in claims:
            faults.hit(f"{self._role}.after_claim")
            self.begin(claim, None, ahead=ahead)

    def _end(self, finished: Sequence[Finished]) -> list[bool]:
        """Forget the jobs and ack their deliveries: the store has each outcome, or the job under a lease
        that is no longer renewed. Which of them were still held here (not released meanwhile)."""
        held = [self._runners.forget(f.running) for f in finished]
        deliveries = [f.running.delivery for f, ours in zip(finished, held, strict=True) if ours]
        self._acker.ack([d for d in deliveries if d is not None])
        return held

    def _patiently(self, fn: Callable[..., T], *args: Any) -> T | None:
        """One write transaction, retried while the store is unavailable for up to a lease's length;
        None if it never went through."""
        try:
            written = retry_while_unavailable(
                partial(db.transact, self._engine, fn, *args),
                give_up_after=self._settings.lease_seconds,
                pauses=WRITE_RETRY_PAUSES,
                on_retry=self._unavailable.failed,
            )
        except db.StoreUnavailable as exc:
            log.error("store unavailable, giving up: %s", exc)
            return None
        self._unavailable.answered()
        return written

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
        self._writer.join(timeout)


def _outcome_name(held: Held, state: State | None) -> str:
    if state is not None:
        return state.value
    return Release.RELEASED.value if held.handed_back else "fenced"

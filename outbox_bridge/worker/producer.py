"""The producer: what a worker process claims, and when, as River's producer fetches work for its executor.

It holds the deliveries that arrived and are not claimed yet, and says before each round of the store
writer what the round claims (`plan`): the delivered jobs up to the room the claim budget leaves
(`worker.budget`), in the order the store hands out work and within the process's `TENANT_SHARE`
(`worker.share`); while its table source says so (`worker.modes.TableSource`), due jobs from the jobs table
up to the room the deliveries leave; and the jobs claimed ahead that a thread now runs, to be shown
started. Its claims are written in the round's transaction, after the outcomes the round commits
(`claim`); only after that commit does it hand the claimed jobs to the executor (`worker.runners`) and ack
the refused deliveries (`claimed`). A refused claim (finished, leased by a live worker, waiting out a
backoff, waiting for the sweeper, of a paused kind, or unknown) is acked without running: it is a duplicate,
a retry whose own outbox row delivers it later, or a job that resuming its kind announces again.

Between rounds it gives back to the store the jobs claimed here that wait for a thread when claiming ahead
stops or the share starts to apply (`worker.give_back`), and settles the deliveries the broker link says
were held too long (`worker.held`). Every method runs on the store writer's thread, but `held_past` and
`stop`."""

from __future__ import annotations

import collections
import logging
from collections import Counter
from collections.abc import Collection, Sequence

from sqlalchemy import Connection, Engine

from outbox_bridge.core import clock, faults
from outbox_bridge.core.backoff import compute_backoff
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import claiming, db
from outbox_bridge.jobstore.claiming import ClaimResult, Refusal
from outbox_bridge.jobstore.limits import Limits
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.telemetry import instruments
from outbox_bridge.telemetry.instruments import DELIVERIES
from outbox_bridge.worker import give_back
from outbox_bridge.worker.budget import AHEAD_SECONDS
from outbox_bridge.worker.counts import WriterCounts
from outbox_bridge.worker.held import HeldDeliveries
from outbox_bridge.worker.modes import Acker, TableSource
from outbox_bridge.worker.polling import any_due
from outbox_bridge.worker.retry import PatientStore
from outbox_bridge.worker.rounds import BrokerDelivery, Claimed, Claims, claim_all, take_in_order
from outbox_bridge.worker.runners import Runners
from outbox_bridge.worker.share import TenantShare

log = logging.getLogger(__name__)

# After a round the store took nothing from, its deliveries are tried again after this (doubling) pause.
RETRY_FIRST_PAUSE = 0.05
RETRY_MAX_PAUSE = 1.0
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
    Refusal.OTHER_QUEUE: instruments.OTHER_QUEUE,
}


class Producer:
    """The claiming side of one worker process (module docstring), or of one of its pools of threads: of
    its named `queues` only, when given. Fault point `<role>.after_claim` (`core.faults`) lets the
    end-to-end tests kill the process after a claim's commit."""

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        runners: Runners,
        store: PatientStore,
        counts: WriterCounts,
        *,
        limits: Limits,
        worker: str,
        role: str,
        acker: Acker,
        table: TableSource | None,
        concurrency: int,
        queues: Collection[str] | None = None,
    ) -> None:
        self._engine = engine
        self._queues = queues
        self._settings = settings
        self._runners = runners
        self._store = store
        self._counts = counts
        self._limits = limits
        self._worker = worker
        self._role = role
        self._acker = acker
        self.table = table
        self._share = TenantShare(settings.tenant_share, concurrency)
        self._bursting = False
        self._failed_rounds = 0  # rounds in a row the store took nothing from
        self._waiting: collections.deque[BrokerDelivery] = collections.deque()  # delivered, not claimed yet
        self._accepting = True
        self._held = HeldDeliveries(settings, store, acker, counts)

    def offered(self, deliveries: Sequence[BrokerDelivery]) -> None:
        """Deliveries that arrived join those waiting to be claimed."""
        self._waiting.extend(deliveries)
        self._share.saw(delivery.tenant for delivery in deliveries)

    def held_past(self, generation: int, upto: int) -> None:
        """The broker link's deliveries of connection `generation` up to tag `upto` have been held past
        `CONSUMER_DELIVERY_HOLD_SECONDS`: settle them before the next round (`worker.held`). Any thread."""
        self._held.mark(generation, upto)

    def stop(self) -> None:
        """Claim nothing more; the deliveries waiting go back to the queue before the next round. Any
        thread."""
        self._accepting = False

    def requeue_waiting(self) -> None:
        self._acker.requeue(list(self._waiting))
        self._waiting.clear()

    def plan(self, paused_only: bool) -> Claims | None:
        """Before a round: settle what waited too long, give back what the budget or the share says, and
        say what the round claims; None when it claims nothing (no room for the deliveries waiting, no look
        at the table, no job to show started). `paused_only`: the writer was woken by its pause alone, with
        nothing else to write; a look at the table then finds out first whether any job is due."""
        if self._held.marked:
            claimed = [r.delivery for r in self._runners.claimed() if r.delivery is not None]
            self._held.settle(self._waiting, claimed)
        if not self._accepting:  # what it still holds is given back as the process stops
            self.requeue_waiting()
            self._runners.give_back_due = False
        else:
            if self._runners.give_back_due:
                give_back.after_claiming_ahead(self._runners, self._waiting, self._counts)
            give_back.over_share(self._engine, self._runners, self._share, self._waiting, self._counts)
        room = self._room()
        table = self.table if self._accepting else None
        from_table = table is not None and table.check() and room > 0  # claims from the jobs table too
        if from_table and paused_only and not self._waiting and not self._any_due():
            return None  # woken by its pause alone, and the table has nothing due
        marks = self._runners.began_running(AHEAD_SECONDS)
        if (room > 0 and bool(self._waiting)) or from_table or marks:
            return Claims(from_table=from_table, marks=marks)
        return None

    def top_up(self, conn: Connection, claims: Claims) -> None:
        """In the round's transaction, once it holds the write lock (once: a rerun writes the same round):
        choose the deliveries it claims, in order and within the share, and the room left for the table."""
        room = self._room()
        running = Counter(self._runners.tenants())
        wanted = room and (self._waiting or claims.from_table)
        waiting, from_table = self._waiting_tenants(), claims.from_table
        claims.share = self._share.bound(conn, running, waiting, room, from_table) if wanted else None
        most = claims.share.most if claims.share else None
        claims.deliveries = take_in_order(self._waiting, room, running, most)
        claims.held_back = most is not None and not claims.deliveries and bool(self._waiting)
        claims.table_room = room - len(claims.deliveries) if claims.from_table else 0
        claims.free = self._runners.idle()

    def claim(self, conn: Connection, claims: Claims) -> Claimed:
        """Write the round's claims in its transaction: the delivered jobs, the table's due jobs, and the
        marks of the jobs claimed ahead that a thread now runs."""
        job_ids = [d.job_id for d in claims.deliveries]
        lease, cap, free = self._settings.lease_seconds, self._settings.tenant_max_running, claims.free
        results = claim_all(conn, job_ids, self._worker, lease, cap, self._limits, free, self._queues)
        table: list[Claim] = []
        if claims.table_room > 0:
            claims.table_ahead = free is not None and claims.table_room > free - len(job_ids)
            table = claiming.claim_due(
                conn, self._worker, clock.now(), lease, claims.table_room, tenant_cap=cap,
                share=claims.share, limits=self._limits, ahead=claims.table_ahead, queues=self._queues,
            )  # fmt: skip
        claiming.mark_running(
            conn, [(r.claim.job_id, r.claim.epoch, r.began_at or 0.0) for r in claims.marks]
        )
        return results, table

    def claimed(self, claims: Claims, claimed: Claimed) -> None:
        """The round committed: begin the claimed jobs, ack the refused deliveries."""
        # A round the share let take no delivery is tried again after a growing pause, as a failed one:
        # what frees room (a job that ends, another tenant's delivery) wakes the writer anyway.
        self._failed_rounds = self._failed_rounds + 1 if claims.held_back else 0
        results, table = claimed
        self._runners.marked(claims.marks)
        ahead = claims.free is not None and claims.free < len(results)
        self._claimed(claims.deliveries, results, ahead)
        if claims.from_table and self.table is not None:
            self._claimed_from_table(table, claims.table_ahead)
            self.table.took(len(table), claims.table_room)

    def not_claimed(self, claims: Claims) -> None:
        """The store took nothing of the round: its deliveries wait for the next one, first."""
        self._failed_rounds += 1
        self._waiting.extendleft(reversed(claims.deliveries))  # tried again in the next round
        self.table_not_claimed(claims)

    def table_not_claimed(self, claims: Claims) -> None:
        if claims.from_table and self.table is not None:
            self.table.took(0, claims.table_room)  # what the table held is looked for again after its pause

    def one_by_one(self, claims: Claims) -> list[Claims]:
        """The claims of a failed round, one delivery each, to be written alone."""
        return [Claims([delivery]) for delivery in claims.deliveries]

    def gave_up(self, claims: Claims) -> None:
        """Deliveries the store cannot claim even alone: dead-lettered (the relay's dead-letter check
        settles them from the store)."""
        for delivery in claims.deliveries:
            log.error("job %s: the store cannot claim it; dead-lettering its delivery", delivery.job_id)
        self._acker.reject(claims.deliveries)
        DELIVERIES.labels(instruments.DEAD_LETTERED).inc(len(claims.deliveries))

    def wait_seconds(self) -> float | None:
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
            self._store.failed(exc, self.table.wait_seconds() or 0.0)
            return False
        except Exception:  # a bug must not cost the process its writer: the round decides
            log.exception("unexpected error reading whether any job is due")
            return True
        self._store.answered()
        if not due:
            self.table.took(0, self._room())
        return due

    def _any_due_in(self, conn: Connection) -> bool:
        held, waiting = Counter(self._runners.tenants()), self._waiting_tenants()
        share = self._share.bound(conn, held, waiting, self._room(), table=True)
        return any_due(conn, self._settings.tenant_max_running, share, self._limits, self._queues)

    def _room(self) -> int:
        """How many more jobs this process may claim now, starting or stopping claiming ahead as the
        budget says. Deliveries beyond the room wait here, unacked, for a later round."""
        room = self._runners.room() if self._accepting else 0
        self._bursting = self._runners.bursting and self._accepting
        return room

    def _waiting_tenants(self) -> Counter[str]:
        return Counter(delivery.tenant for delivery in self._waiting)

    def _claimed(self, deliveries: list[BrokerDelivery], results: list[ClaimResult], ahead: bool) -> None:
        """Begin the claimed jobs (claimed as started at once, or all `ahead` of a thread: `claim_all`);
        ack the refused ones."""
        refused = []
        for delivery, result in zip(deliveries, results, strict=True):
            if result.claim is None:
                assert result.refusal is not None
                log.info("job %s not run (%s): delivery acked", delivery.job_id, result.refusal.value)
                refused.append(delivery)
                DELIVERIES.labels(REFUSED_AS[result.refusal]).inc()
                continue
            DELIVERIES.labels(instruments.RAN).inc()
            faults.hit(f"{self._role}.after_claim")
            self._runners.begin(result.claim, delivery, delivery.traceparent, ahead=ahead)
        if deliveries:
            self._counts.add(claim_rounds=1, claimed=len(deliveries) - len(refused), refused=len(refused))
        self._acker.ack(refused)

    def _claimed_from_table(self, claims: list[Claim], ahead: bool) -> None:
        """Claims from the table: run without a delivery (the run continues the stored trace context). They
        were claimed as started at once when the threads free could take all it might claim, else all as
        claimed ahead (`ahead`)."""
        self._share.saw(claim.tenant for claim in claims)
        for claim in claims:
            faults.hit(f"{self._role}.after_claim")
            self._runners.begin(claim, None, None, ahead=ahead)

"""A hypothesis state machine drives the real store (a SQLite file per run) with accepts, claims by several
workers that remember every claim they ever made (stale ones included), renewals, external-effect marks,
completions, failures, clean shutdowns (releases), stale workers trying every write they have (checkpoints
too), crashes (the clock jumps past every lease), sweeps and cancels.

After every step it checks what the store promises: at most one committed result per job, epochs only
grow, a write presented without a live fence changes nothing, `dead` only after the attempt budget or the
deadline, `unknown` only after a started external effect, and no accepted job is ever lost."""

from __future__ import annotations

import itertools
import random
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import Connection, select

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import claiming, db, fenced, intake, migrate, operator, sweeper
from outbox_bridge.jobstore.decisions import Decision, decide_completion, decide_expired_lease, decide_failure
from outbox_bridge.jobstore.errors import Fenced, IdempotencyConflict
from outbox_bridge.jobstore.records import Attempt, Claim, Job
from outbox_bridge.jobstore.schema import attempts, jobs, outbox
from outbox_bridge.jobstore.states import State, can_transition
from tests.conftest import make_settings

# Each run makes its own SQLite file, whatever the stores the suite runs on.
pytestmark = pytest.mark.databases("sqlite")

LEASE = 10.0
CRASH = LEASE + 0.5  # a jump of the clock past every lease: the workers crashed
MAX_ATTEMPTS = 2
# A cancel settles a job for good; a few per run leave the other endings room to happen.
MAX_CANCELS = 3
WORKERS = ("w1", "w2", "w3")
PICKS = st.tuples(st.integers(0, len(WORKERS) - 1), st.integers(0, 3))


@dataclass(frozen=True)
class JobView:
    """One job as the store holds it: its row, its attempts and its outbox rows."""

    job: Job
    attempts: tuple[Attempt, ...]
    outbox: tuple[dict[str, Any], ...]


def read_views(conn: Connection, job_ids: list[str] | None = None) -> dict[str, JobView]:
    job_query, attempt_query, outbox_query = select(jobs), select(attempts), select(outbox)
    if job_ids is not None:
        job_query = job_query.where(jobs.c.id.in_(job_ids))
        attempt_query = attempt_query.where(attempts.c.job_id.in_(job_ids))
        outbox_query = outbox_query.where(outbox.c.job_id.in_(job_ids))
    found = {r["id"]: Job.from_row(r) for r in conn.execute(job_query).mappings()}
    tries: dict[str, list[Attempt]] = {job_id: [] for job_id in found}
    for row in conn.execute(attempt_query.order_by(attempts.c.epoch)).mappings():
        tries[row["job_id"]].append(Attempt.from_row(row))
    rows: dict[str, list[dict[str, Any]]] = {job_id: [] for job_id in found}
    for row in conn.execute(outbox_query.order_by(outbox.c.id)).mappings():
        rows[row["job_id"]].append(dict(row))
    return {job_id: JobView(job, tuple(tries[job_id]), tuple(rows[job_id])) for job_id, job in found.items()}


def _fail(permanent: bool) -> Callable[[Connection, Claim, float, Backoff], object]:
    def write(conn: Connection, held: Claim, now: float, backoff: Backoff) -> object:
        return fenced.fail(
            conn,
            held.job_id,
            held.epoch,
            held.attempt_id,
            code="boom",
            message="it broke",
            permanent=permanent,
            now=now,
            backoff=backoff,
        )

    return write


# Every write a worker makes under its fence.
WRITES: dict[str, Callable[[Connection, Claim, float, Backoff], object]] = {
    "renew_lease": lambda conn, held, now, _: fenced.renew_lease(conn, held.job_id, held.epoch, now, LEASE),
    "mark_external_started": lambda conn, held, now, _: fenced.mark_external_started(
        conn, held.job_id, held.epoch, held.attempt_id, now
    ),
    "save_checkpoint": lambda conn, held, now, _: fenced.save_checkpoint(
        conn, held.job_id, held.epoch, {"epoch": held.epoch}, now
    ),
    "complete": lambda conn, held, now, _: fenced.complete(
        conn, held.job_id, held.epoch, held.attempt_id, {"by": held.worker, "epoch": held.epoch}, now
    ),
    "fail_transient": _fail(permanent=False),
    "fail_permanent": _fail(permanent=True),
    "release": lambda conn, held, now, _: fenced.release(conn, held.job_id, held.epoch, held.attempt_id, now),
}


def write_or_fenced(
    conn: Connection, write: Callable[..., object], held: Claim, now: float, backoff: Backoff
) -> tuple[bool, object]:
    """Run a worker write and commit whatever it did, even when it was fenced: so a comparison of the rows
    shows what the guard itself wrote, not what a rollback undid."""
    try:
        return False, write(conn, held, now, backoff)
    except Fenced:
        return True, None


def holds_fence(job: Job, held: Claim, now: float) -> bool:
    """The store's promise for a worker write: this epoch, still running, lease alive, deadline ahead."""
    return (
        job.epoch == held.epoch
        and job.state is State.RUNNING
        and job.lease_expires_at is not None
        and job.lease_expires_at > now
        and (job.deadline_at is None or job.deadline_at > now)
    )


def claimable(job: Job, now: float) -> bool:
    """When the store promises that a claim succeeds."""
    queued = job.state is State.QUEUED and job.available_at <= now
    expired = (
        job.state is State.RUNNING
        and job.lease_expires_at is not None
        and job.lease_expires_at <= now
        and job.external_epoch != job.epoch
    )
    return (
        (queued or expired)
        and job.attempts < job.max_attempts
        and not job.cancel_requested
        and (job.deadline_at is None or job.deadline_at > now)
    )


def swept_to(job: Job, now: float) -> State | None:
    """Where the sweeper must move `job` at `now`, or None when the job is not overdue."""
    deadline_passed = job.deadline_at is not None and job.deadline_at <= now
    if job.state is State.QUEUED:
        return State.DEAD if deadline_passed else None
    if job.state is not State.RUNNING:
        return None
    assert job.lease_expires_at is not None
    if job.lease_expires_at > now and not deadline_passed:
        return None
    return decide_expired_lease(
        external_started=job.external_epoch == job.epoch,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        cancel_requested=job.cancel_requested,
        deadline_passed=deadline_passed,
        backoff=0.0,
    ).state


class StoreMachine(RuleBasedStateMachine):
    job_ids = Bundle("job_ids")

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="store-machine-"))
        self.settings = make_settings(
            self.dir,
            database_url=f"sqlite:///{self.dir / 'jobs.db'}",
            max_attempts=MAX_ATTEMPTS,
            lease_seconds=LEASE,
        )
        self.engine = db.make_engine(self.settings)
        migrate.init_schema(self.settings, self.engine)
        self.clock = FakeClock()
        self.backoff = Backoff(base=2.0, cap=8.0, rng=random.Random(0))
        self.keys: dict[str, tuple[str, str]] = {}  # idempotency key -> (job id, fingerprint)
        self.last_seen: dict[str, Job] = {}
        self.external_marks: set[tuple[str, int]] = set()  # (job id, epoch) whose mark committed
        self.remembered: dict[str, list[Claim]] = {worker: [] for worker in WORKERS}  # stale ones too
        self.cancels = 0

    def teardown(self) -> None:
        self.engine.dispose()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def now(self) -> float:
        return self.clock.now()

    def view(self, job_id: str) -> JobView:
        return db.read(self.engine, read_views, [job_id])[job_id]

    # Clients and operators

    @initialize(target=job_ids)
    def first_jobs(self) -> object:
        """One job without a deadline and one whose deadline falls inside its first lease, both claimed: every
        run starts with work in the workers' hands."""
        first = multiple(self.accept(0, variant=0, deadline=None), self.accept(1, variant=0, deadline=8.0))
        for worker in WORKERS[:2]:
            self.claim_next(worker)
        return first

    @rule(
        target=job_ids,
        key=st.integers(0, 3),
        variant=st.integers(0, 3),
        deadline=st.sampled_from([None, None, 8.0, 30.0]),
    )
    def accept(self, key: int, variant: int, deadline: float | None) -> object:
        """A client submits; mostly the same request again under a used key, sometimes a different one
        (another payload or deadline)."""
        operation_key, payload = f"key-{key}", {"variant": min(variant, 1)}
        print_ = intake.fingerprint("noop", payload, deadline)
        try:
            accepted = db.transact(
                self.engine,
                intake.accept,
                tenant="acme",
                owner="alice",
                kind="noop",
                payload=payload,
                operation_key=operation_key,
                now=self.now,
                max_attempts=MAX_ATTEMPTS,
                deadline_seconds=deadline,
            )
        except IdempotencyConflict as conflict:
            known_id, known_print = self.keys[operation_key]
            assert conflict.job_id == known_id and known_print != print_
            return multiple()
        if operation_key in self.keys:
            assert not accepted.created
            assert self.keys[operation_key] == (accepted.job.id, print_)
        else:
            assert accepted.created
            self.keys[operation_key] = (accepted.job.id, print_)
        return accepted.job.id

    @precondition(lambda self: self.cancels < MAX_CANCELS)
    @rule(job_id=job_ids, claimed=st.none() | PICKS)
    def cancel(self, job_id: str, claimed: tuple[int, int] | None) -> None:
        """A client cancels a job: any job, or one a worker claimed (most often while it runs)."""
        self.cancels += 1
        if claimed is not None and self.has_claims():
            job_id = self.recall(claimed).job_id
        before = self.view(job_id).job
        outcome = db.transact(self.engine, operator.request_cancel, job_id, self.now)
        after = self.view(job_id).job
        expected = {
            State.QUEUED: operator.CancelOutcome.CANCELLED,
            State.RUNNING: operator.CancelOutcome.REQUESTED,
        }
        assert outcome is expected.get(before.state, operator.CancelOutcome.UNCHANGED)
        if outcome is operator.CancelOutcome.UNCHANGED:
            assert after == before

    # Workers

    @rule(job_id=job_ids, worker=st.sampled_from(WORKERS))
    def claim(self, job_id: str, worker: str) -> None:
        before = self.view(job_id)
        result = db.transact(self.engine, claiming.claim, job_id, worker, self.now, LEASE)
        after = self.view(job_id)
        assert (result.claim is not None) == claimable(before.job, self.now)
        if result.claim is None:
            assert after == before, "a refused claim wrote something"
            return
        assert (result.claim.epoch, result.claim.attempts) == (before.job.epoch + 1, before.job.attempts + 1)
        self.remembered[worker].append(result.claim)

    @rule(worker=st.sampled_from(WORKERS))
    def claim_next(self, worker: str) -> None:
        before = db.read(self.engine, read_views)
        waiting = [v.job for v in before.values() if claimable(v.job, self.now)]
        held = db.transact(self.engine, claiming.claim_next, worker, self.now, LEASE)
        if held is None:
            assert not waiting
            return
        assert before[held.job_id].job.available_at == min(job.available_at for job in waiting)
        assert all(row["published_at"] is not None for row in self.view(held.job_id).outbox)
        self.remembered[worker].append(held)

    def recall(self, pick: tuple[int, int]) -> Claim:
        """One claim a worker remembers: mostly its latest (often still live), else an older, stale one."""
        workers = [worker for worker in WORKERS if self.remembered[worker]]
        history = self.remembered[workers[pick[0] % len(workers)]]
        position = (-1, -1, -2, 0)[pick[1]]
        return history[max(position, -len(history))]

    def has_claims(self) -> bool:
        return any(self.remembered.values())

    def stale_claims(self) -> list[Claim]:
        """Claims whose job has been claimed again since: their epoch is behind."""
        newest: dict[str, int] = {}
        for held in itertools.chain.from_iterable(self.remembered.values()):
            newest[held.job_id] = max(newest.get(held.job_id, 0), held.epoch)
        return [
            held
            for held in itertools.chain.from_iterable(self.remembered.values())
            if held.epoch < newest[held.job_id]
        ]

    def fenced_write(self, held: Claim, write: str, *, also: bool = True) -> tuple[JobView, object] | None:
        """Present `held`'s fence with `write`. Without a live fence (or when `also` fails) the write must be
        refused and change nothing; with one it must be accepted. Returns (row before, result) if written."""
        before = self.view(held.job_id)
        fenced, result = db.transact(
            self.engine, write_or_fenced, WRITES[write], held, self.now, self.backoff
        )
        if holds_fence(before.job, held, self.now) and also:
            assert not fenced, f"{write}: a live fence was refused: {held} vs {before.job}"
            return before, result
        assert fenced, f"{write}: a write without a live fence went through: {held} vs {before.job}"
        assert self.view(held.job_id) == before, f"{write}: a fenced write changed the store"
        return None

    @precondition(has_claims)
    @rule(pick=PICKS)
    def renew(self, pick: tuple[int, int]) -> None:
        written = self.fenced_write(held := self.recall(pick), "renew_lease")
        if written is not None:
            assert written[1] == written[0].job.cancel_requested
            assert self.view(held.job_id).job.lease_expires_at == self.now + LEASE

    @precondition(has_claims)
    @rule(pick=PICKS, then_crash=st.booleans())
    def mark_external_started(self, pick: tuple[int, int], then_crash: bool) -> None:
        """A worker announces an external call; it may crash right after (the notify kind's worst case)."""
        if self.fenced_write(held := self.recall(pick), "mark_external_started") is not None:
            self.external_marks.add((held.job_id, held.epoch))
        if then_crash:
            self.clock.advance(CRASH)

    @precondition(has_claims)
    @rule(pick=PICKS)
    def complete(self, pick: tuple[int, int]) -> None:
        written = self.fenced_write(held := self.recall(pick), "complete")
        if written is None:
            return
        before, state = written
        # A cancel request wins unless this attempt started an external effect, which cannot be taken back.
        assert state is decide_completion(
            cancel_requested=before.job.cancel_requested,
            external_started=before.job.external_epoch == held.epoch,
        )
        assert self.view(held.job_id).job.state is state

    @precondition(has_claims)
    @rule(pick=PICKS, permanent=st.booleans())
    def fail(self, pick: tuple[int, int], permanent: bool) -> None:
        written = self.fenced_write(
            held := self.recall(pick), "fail_permanent" if permanent else "fail_transient"
        )
        if written is None:
            return
        before, decision = written
        assert isinstance(decision, Decision)
        expected = decide_failure(
            permanent=permanent,
            attempts=before.job.attempts,
            max_attempts=before.job.max_attempts,
            cancel_requested=before.job.cancel_requested,
            deadline_passed=False,
            backoff=0.0,
            code="boom",
            message="it broke",
        )
        assert decision.state is expected.state
        assert self.view(held.job_id).job.state is expected.state

    @precondition(has_claims)
    @rule(pick=PICKS)
    def shutdown(self, pick: tuple[int, int]) -> None:
        """A worker shuts down cleanly and gives back every job it still holds; its stale claims are refused,
        and so is a job whose attempt started an external effect."""
        for held in self.remembered[self.recall(pick).worker]:
            no_external_effect = self.view(held.job_id).job.external_epoch != held.epoch
            written = self.fenced_write(held, "release", also=no_external_effect)
            if written is not None:
                before, after = written[0].job, self.view(held.job_id).job
                assert after.state is (State.CANCELLED if before.cancel_requested else State.QUEUED)
                assert after.attempts == before.attempts - 1

    @precondition(lambda self: bool(self.stale_claims()))
    @rule(index=st.integers(0, 20))
    def stale_worker_writes(self, index: int) -> None:
        """A worker that lost its job to a newer claim tries every write it has: each is refused."""
        stale = self.stale_claims()
        held = stale[index % len(stale)]
        for write in WRITES:
            assert self.fenced_write(held, write) is None

    # Time and the sweeper

    # CRASH comes first: generation leans toward the first choice, and crashes are what the sweeper settles.
    @rule(seconds=st.sampled_from([CRASH, 0.5, 2.0, 4.0]), then_sweep=st.booleans())
    def time_passes(self, seconds: float, then_sweep: bool) -> None:
        """The clock moves on; by CRASH every worker has stopped renewing and every lease has run out. The
        sweeper may run right after."""
        self.clock.advance(seconds)
        if then_sweep:
            self.sweep()

    @rule()
    def sweep(self) -> None:
        before = db.read(self.engine, read_views)
        settled = db.transact(self.engine, sweeper.sweep_expired, self.now, backoff=self.backoff)
        after = db.read(self.engine, read_views)
        expected = {job_id: swept_to(view.job, self.now) for job_id, view in before.items()}
        assert settled == Counter(state.value for state in expected.values() if state is not None)
        for job_id, state in expected.items():
            if state is None:
                assert after[job_id] == before[job_id], "the sweeper touched a job that was not overdue"
            else:
                assert after[job_id].job.state is state

    # What must hold after every step

    @invariant()
    def store_keeps_its_promises(self) -> None:
        views = db.read(self.engine, read_views)
        assert set(views) == {job_id for job_id, _ in self.keys.values()}, "an accepted job was lost"
        for view in views.values():
            self.check_result(view)
            self.check_history(view)
            self.check_settled(view)
            self.check_attempts(view)
            self.check_reachable(view)
            self.last_seen[view.job.id] = view.job

    def check_result(self, view: JobView) -> None:
        """At most one committed result, and only with `succeeded`, naming a succeeded attempt of the job."""
        job = view.job
        succeeded = [a for a in view.attempts if a.outcome == "succeeded"]
        assert len(succeeded) <= 1
        if job.state is State.SUCCEEDED:
            assert [a.id for a in succeeded] == [job.result_attempt_id]
            assert succeeded[0].job_id == job.id and succeeded[0].output is not None
        else:
            assert job.result_attempt_id is None and not succeeded

    def check_history(self, view: JobView) -> None:
        """Epochs only grow, and every state change is one the table allows."""
        previous = self.last_seen.get(view.job.id)
        if previous is None:
            return
        assert view.job.epoch >= previous.epoch
        if view.job.state is not previous.state:
            assert can_transition(previous.state, view.job.state), f"{previous.state} -> {view.job.state}"

    def check_settled(self, view: JobView) -> None:
        """`dead` only after the attempt budget or the deadline; `unknown` only after a committed external
        mark by the epoch that lost its lease."""
        job = view.job
        if job.state is State.DEAD:
            out_of_time = job.deadline_at is not None and job.deadline_at <= (job.finished_at or 0.0)
            assert job.attempts >= job.max_attempts or out_of_time
        if job.state is State.UNKNOWN:
            assert (job.id, job.epoch) in self.external_marks
            assert job.external_epoch == job.epoch
            assert any(a.epoch == job.epoch and a.external_started_at is not None for a in view.attempts)

    def check_attempts(self, view: JobView) -> None:
        """One attempt per epoch; exactly the current epoch's attempt is open while the job runs."""
        job = view.job
        assert [a.epoch for a in view.attempts] == list(range(1, job.epoch + 1))
        open_epochs = [a.epoch for a in view.attempts if a.outcome == "running"]
        assert open_epochs == ([job.epoch] if job.state is State.RUNNING else [])

    def check_reachable(self, view: JobView) -> None:
        """A queued job can still be claimed, and a delivery is pending for when it comes due."""
        job = view.job
        if job.state is not State.QUEUED:
            return
        assert not job.cancel_requested and job.attempts < job.max_attempts
        due = [row for row in view.outbox if row["published_at"] is None]
        assert any(row["available_at"] >= job.available_at for row in due), "no delivery will come"


def test_the_store_keeps_its_promises_under_any_interleaving() -> None:
    run_state_machine_as_test(
        StoreMachine,
        settings=settings(
            max_examples=60,
            stateful_step_count=40,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )

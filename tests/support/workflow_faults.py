"""The parts of the workflows fault test (tests/e2e/test_workflow_faults.py): a feeder that accepts batches
and dependency chains into the store with the store's own API (as `enqueue_batch` does) while relays and
consumers are being killed, a watch that reads the store while they run, and the checks of what the store,
the attempts and the stub provider say afterwards.

Every check returns the problems it found as lines that say what was seen, so one assertion can show them
all together."""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, select

from outbox_bridge.core import clock
from outbox_bridge.jobstore import db, intake, workflows
from outbox_bridge.jobstore.schema import batch_callbacks, batch_members, job_dependencies, jobs
from outbox_bridge.jobstore.states import ACTIVE, State
from outbox_bridge.jobstore.workflows import After, Member
from tests.support import soak
from tests.support.invariants import Snapshot

TENANT, OWNER = "acme", "alice"
# Attempts of every job: a job whose consumer is killed under it runs again; this many losses would end it
# `dead`, which a run of a few kills never comes near.
MAX_ATTEMPTS = 10
FAILS = ("flaky", {"mode": "permanent"})  # fails at its first attempt, for good
CALLBACK_ENDS = frozenset({State.SUCCEEDED, State.UNKNOWN})  # unknown: its consumer died after the send began
SHOWN = soak.SHOWN
ACTIVE_STATES = [s.value for s in ACTIVE]


@dataclass(frozen=True)
class Shape:
    """How much work: `batches` of `members` (every `failing_every`-th batch with one member that fails),
    `chains` of `chain_length` jobs, each waiting for the one before (the head of chain n fails when n is a
    multiple of `failing_every_chain`, so the rest of that chain is cancelled); every member of the first
    `chained_batches` batches waits for the last job of the chain accepted just before its batch."""

    batches: int = 20
    members: int = 10
    failing_every: int = 5
    chains: int = 10
    chain_length: int = 3
    failing_every_chain: int = 3
    chained_batches: int = 2

    def chain_fails(self, n: int) -> bool:
        return n % self.failing_every_chain == 0


@dataclass
class Workload:
    """What the feeder accepted: the batches and their callbacks' ids, the chains (head first), the batches'
    members, and the states each job may end in."""

    batches: dict[str, str] = field(default_factory=dict)  # batch id -> its callback job's id
    chains: list[list[str]] = field(default_factory=list)
    members: list[str] = field(default_factory=list)
    ends: dict[str, frozenset[State]] = field(default_factory=dict)


def prepared(kind: str, payload: dict[str, Any], key: str) -> intake.Prepared:
    return intake.prepare(
        tenant=TENANT, owner=OWNER, kind=kind, payload=payload, operation_key=key, now=clock.now(),
        max_attempts=MAX_ATTEMPTS,
    )  # fmt: skip


def sleep_payload(rng: random.Random) -> dict[str, Any]:
    return {"seconds": round(rng.uniform(0.02, 0.15), 3)}


class Feeder:
    """Accepts the `shape`'s work from a thread of its own, in steps spread evenly over `seconds` (step n:
    chain n, then batch n), each chain job and each batch in a transaction of its own."""

    def __init__(self, engine: Engine, shape: Shape, *, seed: int, seconds: float) -> None:
        self.engine = engine
        self.shape = shape
        self.accepted = Workload()
        self.errors: list[str] = []
        self._rng = random.Random(seed)
        self._pace = seconds / max(shape.batches, shape.chains)
        self._thread = threading.Thread(target=self._run, name="feeder", daemon=True)

    def start(self) -> Feeder:
        self._thread.start()
        return self

    def join(self, timeout: float = 60.0) -> None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.errors.append(f"the feeder was still accepting {timeout:.0f}s after the load's end")

    def _run(self) -> None:
        try:
            for n in range(max(self.shape.batches, self.shape.chains)):
                began = time.monotonic()
                tail = self._chain(n) if n < self.shape.chains else None
                if n < self.shape.batches:
                    self._batch(n, tail if n < self.shape.chained_batches else None)
                time.sleep(max(0.0, began + self._pace - time.monotonic()))
        except Exception as exc:  # the test reports it with its other problems
            self.errors.append(f"the feeder stopped: {type(exc).__name__}: {exc}")

    def _chain(self, n: int) -> str:
        fails = self.shape.chain_fails(n)
        ids: list[str] = []
        for position in range(self.shape.chain_length):
            kind, payload = FAILS if fails and position == 0 else ("sleep", sleep_payload(self._rng))
            p = prepared(kind, payload, f"chain-{n}-{position}")
            if ids:
                outcome = db.transact(self.engine, workflows.accept_after, p, After((ids[-1],)))
            else:
                (first,) = db.transact(self.engine, intake.accept_prepared, [p])
                assert isinstance(first, intake.Accepted), first
                outcome = first
            ids.append(outcome.job.id)
            self.accepted.ends[outcome.job.id] = frozenset(
                {State.FAILED if position == 0 else State.CANCELLED} if fails else {State.SUCCEEDED}
            )
        self.accepted.chains.append(ids)
        return ids[-1]

    def _batch(self, n: int, after: str | None) -> None:
        """Batch n: sleeping members (one that fails in every `failing_every`-th), each waiting for `after`
        when given, and a `notify` callback."""
        fails = n % self.shape.failing_every == self.shape.failing_every - 1
        members, ends = [], []
        for position in range(self.shape.members):
            failing = fails and position == self.shape.members // 2
            kind, payload = FAILS if failing else ("sleep", sleep_payload(self._rng))
            waits = None if after is None else After((after,))
            members.append(Member(prepared(kind, payload, "member"), waits))
            ends.append(State.FAILED if failing else State.SUCCEEDED)
        if after is not None and State.SUCCEEDED not in self.accepted.ends[after]:
            ends = [State.CANCELLED] * len(ends)
        callback = prepared("notify", {"to": "ops@example.com", "message": f"batch {n} done"}, "callback")
        done = db.transact(
            self.engine, workflows.accept_batch, tenant=TENANT, owner=OWNER, operation_key=f"batch-{n}",
            members=members, callback=callback, now=clock.now(),
        )  # fmt: skip
        for accepted, end in zip(done.members, ends, strict=True):
            self.accepted.members.append(accepted.job.id)
            self.accepted.ends[accepted.job.id] = frozenset({end})
        self.accepted.batches[done.batch.id] = callback.row["id"]
        self.accepted.ends[callback.row["id"]] = CALLBACK_ENDS


# The watch: what must never be seen, at any moment.


def _early_callbacks(conn: Connection) -> list[str]:
    """Batches whose callback job exists while one of their members has not ended."""
    member = jobs.alias("member")
    unfinished = (
        select(batch_members.c.job_id)
        .join(member, member.c.id == batch_members.c.job_id)
        .where(batch_members.c.batch_id == batch_callbacks.c.batch_id, member.c.state.in_(ACTIVE_STATES))
        .exists()
    )
    query = select(batch_callbacks.c.batch_id).join(jobs, jobs.c.id == batch_callbacks.c.id).where(unfinished)
    return [str(batch_id) for batch_id in conn.execute(query).scalars()]


def _early_starts(conn: Connection) -> list[tuple[str, str]]:
    """(job, the job it waits for) where the first runs or succeeded while the second has not succeeded."""
    dependent, dependency = jobs.alias("dependent"), jobs.alias("dependency")
    query = (
        select(dependent.c.id, dependency.c.id)
        .select_from(job_dependencies)
        .join(dependent, dependent.c.id == job_dependencies.c.job_id)
        .join(dependency, dependency.c.id == job_dependencies.c.depends_on)
        .where(dependent.c.state.in_(["running", "succeeded"]), dependency.c.state != "succeeded")
    )
    return [(str(a), str(b)) for a, b in conn.execute(query).all()]


class Watch:
    """Reads the store every `interval` seconds until stopped, each check in one statement (one snapshot):
    a callback job that exists while a member of its batch has not ended, a job that runs while a job it
    waits for has not succeeded. What it saw is kept, with how many reads it made."""

    def __init__(self, engine: Engine, interval: float = 0.1) -> None:
        self.engine = engine
        self.interval = interval
        self.reads = 0
        self.early_callbacks: set[str] = set()
        self.early_starts: set[tuple[str, str]] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watch", daemon=True)

    def start(self) -> Watch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.early_callbacks.update(db.read(self.engine, _early_callbacks))
                self.early_starts.update(db.read(self.engine, _early_starts))
                self.reads += 1
            except Exception as exc:  # the test reports it with its other problems
                self.errors.append(f"the watch stopped: {type(exc).__name__}: {exc}")
                return

    def problems(self) -> list[str]:
        problems = list(self.errors)
        if self.early_callbacks:
            shown = ", ".join(sorted(self.early_callbacks)[:SHOWN])
            problems.append(
                f"{len(self.early_callbacks)} callbacks existed before their batch ended: {shown}"
            )
        if self.early_starts:
            shown = ", ".join(f"{a} before {b}" for a, b in sorted(self.early_starts)[:SHOWN])
            problems.append(
                f"{len(self.early_starts)} jobs ran before a job they wait for succeeded: {shown}"
            )
        return problems


# The checks afterwards. Each returns its problems.


def first_start(seen: Snapshot, job_id: str) -> float | None:
    started = [a.started_at for a in seen.attempts.get(job_id, [])]
    return min(started) if started else None


def outcome_problems(seen: Snapshot, work: Workload) -> list[str]:
    """Every job accepted is in the store, in a state it may end in; the store holds no other job."""
    wrong = [
        f"{soak.describe(seen.jobs[i])} (may end {sorted(s.value for s in ends)})"
        for i, ends in work.ends.items()
        if i in seen.jobs and seen.jobs[i].state not in ends
    ]
    missing = [i for i in work.ends if i not in seen.jobs]
    strangers = [soak.describe(j) for i, j in seen.jobs.items() if i not in work.ends]
    problems = []
    for what, found in (("ended otherwise", wrong), ("missing", missing), ("not accepted", strangers)):
        if found:
            problems.append(f"{len(found)} jobs {what}: {'; '.join(found[:SHOWN])}")
    return problems


def batch_problems(engine: Engine, seen: Snapshot, work: Workload) -> list[str]:
    """Every batch done, its callback the one job under its key `batch:<id>:callback`, the job the request
    named, and first run after every member had ended."""
    problems = []
    by_key = Counter(j.operation_key for j in seen.jobs.values())
    for batch_id, callback_id in work.batches.items():
        batch = db.read(engine, workflows.get_batch, batch_id)
        if batch is None or batch.state != "done" or batch.done_at is None:
            problems.append(f"batch {batch_id} is not done: {batch}")
            continue
        callbacks = by_key[f"batch:{batch_id}:callback"]
        if callbacks != 1 or batch.callback_job_id != callback_id:
            problems.append(f"batch {batch_id}: {callbacks} callbacks, named {batch.callback_job_id}")
            continue
        ended = [seen.jobs[i].finished_at for i in batch.jobs]
        started = first_start(seen, callback_id)
        if None in ended:
            problems.append(f"batch {batch_id} is done but a member has no finish time")
        elif started is not None and started <= max(e for e in ended if e is not None):
            problems.append(f"batch {batch_id}: callback {callback_id} started before its last member ended")
    return problems


def dependency_problems(engine: Engine, seen: Snapshot) -> list[str]:
    """A job that ran waited for jobs that all succeeded, and first ran after the last of them ended; a job
    whose dependency did not succeed never ran and ended `cancelled` (`dependency_failed`)."""
    query = select(job_dependencies.c.job_id, job_dependencies.c.depends_on, job_dependencies.c.resolved)
    edges = db.read(engine, lambda conn: conn.execute(query).all())
    problems = []
    for job_id, depends_on, resolved in edges:
        job, dependency = seen.jobs[str(job_id)], seen.jobs[str(depends_on)]
        started = first_start(seen, job.id)
        if not resolved:
            problems.append(f"{soak.describe(job)} still waits for {dependency.id}")
        if dependency.state is not State.SUCCEEDED:
            if started is not None or (job.state, job.error_code) != (State.CANCELLED, "dependency_failed"):
                problems.append(f"{soak.describe(job)}: its dependency {soak.describe(dependency)} failed")
        elif started is not None and (dependency.finished_at is None or started <= dependency.finished_at):
            problems.append(f"{soak.describe(job)} started before {soak.describe(dependency)} ended")
    return problems[:SHOWN] + ([f"... {len(problems)} dependency problems"] if len(problems) > SHOWN else [])


@dataclass(frozen=True)
class Sends:
    """The stub provider's calls: how many for each job id, how many were duplicates of a key, and how many
    torn lines (a writer killed mid-line) it skipped."""

    calls: Counter[str]
    duplicates: int
    torn: int


def sends(notify_log: Path) -> Sends:
    calls, torn = soak.provider_calls(notify_log)
    return Sends(Counter(c["job_id"] for c in calls), sum(bool(c["duplicate"]) for c in calls), torn)


def send_problems(seen: Snapshot, work: Workload, sent: Sends) -> list[str]:
    """The provider was called at most once for each callback (so never sent one twice), exactly once for
    each that succeeded, and for nothing else."""
    callbacks = set(work.batches.values())
    problems = []
    twice = {i: n for i, n in sent.calls.items() if n > 1}
    if twice:
        problems.append(f"{len(twice)} callbacks called the provider more than once: {list(twice.items())}")
    unsent = [
        i for i in callbacks if i in seen.jobs and seen.jobs[i].state is State.SUCCEEDED and not sent.calls[i]
    ]
    if unsent:
        problems.append(f"{len(unsent)} succeeded callbacks made no call: {unsent[:SHOWN]}")
    strangers = [i for i in sent.calls if i not in callbacks]
    if strangers:
        problems.append(f"{len(strangers)} provider calls name no callback: {strangers[:SHOWN]}")
    return problems


# The figures.


def cancelled_dependents(seen: Snapshot, work: Workload) -> tuple[int, int]:
    """Jobs cancelled because a job they waited for failed: by that failure's ending, and at their accept."""
    cancelled = [
        j for i in work.ends if (j := seen.jobs.get(i)) is not None and j.error_code == "dependency_failed"
    ]
    at_accept = sum(j.finished_at == j.created_at for j in cancelled)
    return len(cancelled) - at_accept, at_accept


def callback_delays(engine: Engine, seen: Snapshot, work: Workload) -> list[float]:
    """For each callback that ran: seconds from its batch's end to its first attempt's start."""
    delays = []
    for batch_id, callback_id in work.batches.items():
        batch = db.read(engine, workflows.get_batch, batch_id)
        started = first_start(seen, callback_id)
        if batch is not None and batch.done_at is not None and started is not None:
            delays.append(started - batch.done_at)
    return delays


def last_callback_end(seen: Snapshot, work: Workload) -> float | None:
    ends = [seen.jobs[i].finished_at for i in work.batches.values() if i in seen.jobs]
    return max((e for e in ends if e is not None), default=None)


def callback_figures(seen: Snapshot, work: Workload, sent: Sends) -> str:
    callbacks = [seen.jobs[i] for i in work.batches.values() if i in seen.jobs]
    states = Counter(j.state.value for j in callbacks)
    told = f"{len(callbacks)} callbacks {dict(states)}, {sum(n > 0 for n in sent.calls.values())} sent"
    unknown = [j.id for j in callbacks if j.state is State.UNKNOWN]
    if unknown:
        reached = sum(sent.calls[i] > 0 for i in unknown)
        told += f" ({reached} of the {len(unknown)} unknown ones had reached the provider, once)"
    torn = f", {sent.torn} torn provider lines" if sent.torn else ""
    return told + f", {sent.duplicates} duplicate provider calls{torn}"


def chain_figures(seen: Snapshot, work: Workload) -> str:
    failing = sum(seen.jobs[c[0]].state is State.FAILED for c in work.chains if c[0] in seen.jobs)
    length = len(work.chains[0]) if work.chains else 0
    by_ending, at_accept = cancelled_dependents(seen, work)
    return (
        f"{len(work.chains)} chains of {length} ({failing} with a failing head); {by_ending + at_accept} "
        f"dependents cancelled ({by_ending} by the ending of the job they waited for, {at_accept} at their "
        f"accept)"
    )


def figures(seen: Snapshot, work: Workload, sent: Sends, delays: list[float]) -> str:
    """What the run did, in words and numbers (the kills and the timing are the caller's)."""
    members = Counter(seen.jobs[i].state.value for i in work.members if i in seen.jobs)
    again = sum(j.attempts > 1 for j in seen.jobs.values())
    delay = "no callback started"
    if delays:
        delay = (
            f"a callback started a median {statistics.median(delays):.2f}s (max {max(delays):.2f}s) after "
            f"its batch was done"
        )
    return (
        f"{len(work.batches)} batches, {len(work.members)} members {dict(members)}, "
        f"{callback_figures(seen, work, sent)}; {chain_figures(seen, work)}; {again} jobs ran again after "
        f"losing their consumer; {delay}"
    )

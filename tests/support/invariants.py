"""The invariants every broker scenario must leave behind, checked against the real store and the execution
log the runner writes (one `start` line per execution of a job's code).

    report = check_invariants(settings, accepted=ids, executions={job_id: {1}})

- every accepted job exists and every job is in a terminal state;
- no job has two committed results: the result pointer is set exactly when the job succeeded (an operator
  may settle an `unknown` job as succeeded without one), it names a succeeded attempt of that job at the
  job's current epoch, and at most one attempt of the job succeeded;
- no write from a stale epoch landed: attempts have epochs 1..epoch, one each; every attempt before the
  current epoch ended `lost`, `retry` or `released`, never as a result;
- executions per job are what the scenario allows, and no epoch ran twice.

All violations are collected and raised together in one `AssertionError`.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, select

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, operator
from outbox_bridge.jobstore.records import Attempt, Job
from outbox_bridge.jobstore.schema import attempts, jobs, operator_actions
from outbox_bridge.jobstore.states import TERMINAL, State

SUPERSEDED_OUTCOMES = frozenset({"lost", "retry", "released"})
ONCE: frozenset[int] = frozenset({1})

Allowed = Collection[int] | Callable[[Job], Collection[int]]


@dataclass(frozen=True)
class Snapshot:
    """What the store and the execution log say after a run."""

    jobs: dict[str, Job]
    attempts: dict[str, list[Attempt]]
    starts: dict[str, list[int]]  # job id -> epochs of its `start` lines, in log order
    resolved_as_succeeded: frozenset[str]  # jobs an operator settled as succeeded (`jobs resolve`)

    def executions(self, job_id: str) -> int:
        return len(self.starts.get(job_id, []))

    def states(self) -> Counter[str]:
        return Counter(job.state.value for job in self.jobs.values())


def read_starts(settings: Settings) -> dict[str, list[int]]:
    """The epochs of every `start` line in the execution log, by job."""
    starts: dict[str, list[int]] = defaultdict(list)
    path = settings.execution_log
    if path is None or not path.exists():
        return starts
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if record.get("event") == "start":
            starts[record["job_id"]].append(int(record["epoch"]))
    return starts


def snapshot(settings: Settings, engine: Engine | None = None) -> Snapshot:
    own = engine is None
    engine = engine or db.make_engine(settings)
    try:
        found_jobs, found_attempts, resolved = db.read(engine, _read_all)
    finally:
        if own:
            engine.dispose()
    by_job: dict[str, list[Attempt]] = defaultdict(list)
    for attempt in found_attempts:
        by_job[attempt.job_id].append(attempt)
    return Snapshot({j.id: j for j in found_jobs}, dict(by_job), dict(read_starts(settings)), resolved)


def _read_all(conn: Connection) -> tuple[list[Job], list[Attempt], frozenset[str]]:
    found_jobs = [Job.from_row(r) for r in conn.execute(select(jobs)).mappings()]
    query = select(attempts).order_by(attempts.c.job_id, attempts.c.epoch)
    resolved = select(operator_actions.c.job_id).where(
        operator_actions.c.action == operator.Action.RESOLVE_SUCCEEDED.value
    )
    return (
        found_jobs,
        [Attempt.from_row(r) for r in conn.execute(query).mappings()],
        frozenset(conn.execute(resolved).scalars()),
    )


def check_invariants(
    settings: Settings,
    *,
    accepted: Iterable[str] | None = None,
    executions: Allowed | Mapping[str, Allowed] = ONCE,
    engine: Engine | None = None,
) -> Snapshot:
    """Check every invariant; returns the snapshot it checked. `executions` says how many executions are
    allowed: one set for every job, a function of the job, or a mapping by job id (jobs not in it: once)."""
    seen = snapshot(settings, engine)
    problems: list[str] = []
    for job_id in accepted or ():
        if job_id not in seen.jobs:
            problems.append(f"accepted job {job_id} is not in the store")
    for job in seen.jobs.values():
        tried = seen.attempts.get(job.id, [])
        problems += _terminal(job)
        problems += _one_result(job, tried, resolved=job.id in seen.resolved_as_succeeded)
        problems += _no_stale_write(job, tried)
        problems += _executions(job, seen.starts.get(job.id, []), _allowed(executions, job))
    if problems:
        shown = "\n  ".join(problems[:50])
        raise AssertionError(f"{len(problems)} invariant violations:\n  {shown}")
    return seen


def _allowed(executions: Allowed | Mapping[str, Allowed], job: Job) -> Collection[int]:
    rule: Allowed = executions.get(job.id, ONCE) if isinstance(executions, Mapping) else executions
    return rule(job) if callable(rule) else rule


def _terminal(job: Job) -> list[str]:
    if job.state not in TERMINAL:
        return [f"job {job.id} is {job.state.value}, not terminal"]
    if job.finished_at is None:  # the finished jobs' index holds only jobs with a finish time
        return [f"job {job.id} is {job.state.value} without a finish time"]
    return []


def _one_result(job: Job, tried: list[Attempt], *, resolved: bool) -> list[str]:
    problems = []
    succeeded = [a for a in tried if a.outcome == "succeeded"]
    if len(succeeded) > 1:
        problems.append(f"job {job.id} has {len(succeeded)} succeeded attempts")
    if job.result_attempt_id is None:
        if job.state is State.SUCCEEDED and not resolved:
            problems.append(f"job {job.id} succeeded without a result pointer")
        return problems
    if job.state is not State.SUCCEEDED:
        problems.append(f"job {job.id} is {job.state.value} but has a result pointer")
    named = [a for a in tried if a.id == job.result_attempt_id]
    if not named:
        problems.append(f"job {job.id} result pointer names no attempt of this job")
    elif named[0].outcome != "succeeded" or named[0].epoch != job.epoch:
        a = named[0]
        problems.append(
            f"job {job.id} result names attempt epoch {a.epoch} ({a.outcome}), job epoch {job.epoch}"
        )
    return problems


def _no_stale_write(job: Job, tried: list[Attempt]) -> list[str]:
    problems = []
    epochs = [a.epoch for a in tried]
    if sorted(epochs) != list(range(1, job.epoch + 1)):
        problems.append(f"job {job.id} at epoch {job.epoch} has attempts for epochs {sorted(epochs)}")
    for attempt in tried:
        if attempt.epoch < job.epoch and attempt.outcome not in SUPERSEDED_OUTCOMES:
            problems.append(
                f"job {job.id} attempt at stale epoch {attempt.epoch} ended {attempt.outcome} "
                f"(current epoch {job.epoch})"
            )
        if attempt.outcome == "running" and job.state in TERMINAL:
            problems.append(f"job {job.id} is {job.state.value} but attempt {attempt.epoch} is still running")
    return problems


def _executions(job: Job, started: list[int], allowed: Collection[int]) -> list[str]:
    problems = []
    if len(started) not in allowed:
        problems.append(
            f"job {job.id} ({job.kind}, {job.state.value}) ran {len(started)} times, "
            f"allowed {sorted(allowed)}"
        )
    twice = [epoch for epoch, n in Counter(started).items() if n > 1]
    if twice:
        problems.append(f"job {job.id} ran more than once at epochs {twice}")
    if any(epoch > job.epoch or epoch < 1 for epoch in started):
        problems.append(f"job {job.id} ran at epochs {started}, beyond its claims (epoch {job.epoch})")
    return problems


def running_without_live_lease(settings: Settings, now: float, engine: Engine | None = None) -> list[Job]:
    """Jobs in `running` whose lease is missing or already expired at `now`."""
    seen = snapshot(settings, engine)
    return [
        job
        for job in seen.jobs.values()
        if job.state is State.RUNNING and (job.lease_expires_at is None or job.lease_expires_at <= now)
    ]

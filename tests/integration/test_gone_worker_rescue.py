"""The sweeper settles the running jobs of a worker the process registry calls gone as an expired lease
settles them, without waiting for the lease: its heartbeat row not written for `ALIVE_BEATS` beats, and the
job itself unrenewed for `sweeper.RESCUE_QUIET_SECONDS`. A worker that only paused is fenced when it
resumes; a worker whose heartbeat is merely late but which still renews keeps its job."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from sqlalchemy import Engine

from outbox_bridge.baseline.sweep_loop import SweepLoop
from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import ALIVE_BEATS, Settings
from outbox_bridge.jobstore import db, fenced, queries, sweeper
from outbox_bridge.jobstore.errors import Fenced
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.states import State
from outbox_bridge.relay.housekeeping import sweep_and_prune
from tests.support.processes import a_process, beat, gone_pid
from tests.support.store import claimed, job_row, new_job

BACKOFF = Backoff(base=4.0, cap=60.0)
HEARTBEAT = 5.0
LEASE = 120.0
GONE = "consumer-elsewhere-41"
# Past this many seconds unseen, a process is lost; a job is rescued once unrenewed as long (it is longer
# than `RESCUE_QUIET_SECONDS`).
LOST_AFTER = ALIVE_BEATS * HEARTBEAT + 1


def sweep(engine: Engine, clock: FakeClock) -> Counter[str]:
    return db.transact(engine, sweeper.sweep_expired, clock.now(), backoff=BACKOFF, heartbeat=HEARTBEAT)


def running_on(engine: Engine, clock: FakeClock, worker: str = GONE, *, host: str = "elsewhere") -> Claim:
    """A job claimed by `worker` under a long lease, whose process (on `host`) beats now."""
    beat(engine, a_process("consumer", clock.now(), host=host, worker=worker), clock.now())
    return claimed(engine, new_job(engine), worker, lease=LEASE)


def outcomes(engine: Engine, job_id: str) -> list[tuple[str, str | None]]:
    return [(a.outcome, a.error_code) for a in db.read(engine, queries.attempts_of, job_id)]


def test_a_gone_workers_job_is_queued_again_long_before_its_lease_runs_out(
    engine: Engine, clock: FakeClock
) -> None:
    held = running_on(engine, clock)
    clock.advance(LOST_AFTER)
    assert clock.now() < held.lease_expires_at
    assert sweep(engine, clock) == {"queued": 1}
    job = job_row(engine, held.job_id)
    assert (job.state, job.lease_owner, job.error_code, job.attempts) == (
        State.QUEUED,
        None,
        "lease_expired",
        1,
    )
    assert clock.now() < job.available_at <= clock.now() + BACKOFF.base
    assert outcomes(engine, held.job_id) == [("lost", "lease_expired")]


def test_a_gone_workers_job_after_an_external_effect_started_is_unknown(
    engine: Engine, clock: FakeClock
) -> None:
    held = running_on(engine, clock)
    db.transact(engine, fenced.mark_external_started, held.job_id, held.epoch, held.attempt_id, clock.now())
    clock.advance(LOST_AFTER)
    assert sweep(engine, clock) == {"unknown": 1}
    assert job_row(engine, held.job_id).state is State.UNKNOWN
    assert outcomes(engine, held.job_id) == [("lost", "outcome_unknown")]


def test_the_last_attempt_of_a_gone_worker_is_dead_as_after_an_expired_lease(
    engine: Engine, clock: FakeClock
) -> None:
    beat(engine, a_process("consumer", clock.now(), host="elsewhere", worker=GONE), clock.now())
    held = claimed(engine, new_job(engine, max_attempts=1), GONE, lease=LEASE)
    clock.advance(LOST_AFTER)
    assert sweep(engine, clock) == {"dead": 1}
    assert job_row(engine, held.job_id).error_code == "attempts_exhausted"


def test_a_paused_worker_that_resumes_after_the_rescue_writes_nothing(
    engine: Engine, clock: FakeClock
) -> None:
    paused = running_on(engine, clock)
    clock.advance(LOST_AFTER)  # SIGSTOP: no beat, no renewal
    assert sweep(engine, clock) == {"queued": 1}
    # SIGCONT, before anyone claimed the job again: its lease is gone with its running state.
    with pytest.raises(Fenced):
        db.transact(engine, fenced.renew_lease, paused.job_id, paused.epoch, clock.now(), LEASE)
    clock.set(job_row(engine, paused.job_id).available_at)
    again = claimed(engine, paused.job_id, "consumer-here-2", lease=LEASE)
    assert again.epoch == paused.epoch + 1
    # ...and after another worker claimed it: a stale epoch.
    with pytest.raises(Fenced):
        db.transact(
            engine, fenced.complete, paused.job_id, paused.epoch, paused.attempt_id, {"late": 1}, clock.now()
        )
    db.transact(engine, fenced.complete, again.job_id, again.epoch, again.attempt_id, {"ok": 1}, clock.now())
    job = job_row(engine, paused.job_id)
    assert (job.state, job.result_attempt_id) == (State.SUCCEEDED, again.attempt_id)


def test_a_worker_whose_heartbeat_is_late_but_which_renews_keeps_its_job(
    engine: Engine, clock: FakeClock
) -> None:
    held = running_on(engine, clock)
    for _ in range(int(LOST_AFTER) * 2):  # its heartbeat thread is stuck; its lease keeper is not
        clock.advance(1.0)
        db.transact(engine, fenced.renew_lease, held.job_id, held.epoch, clock.now(), LEASE)
        assert sweep(engine, clock) == {}
    assert job_row(engine, held.job_id).state is State.RUNNING


def test_a_gone_workers_job_renewed_within_the_quiet_time_waits_for_it(
    engine: Engine, clock: FakeClock
) -> None:
    held = running_on(engine, clock)
    clock.advance(LOST_AFTER)
    db.transact(engine, fenced.renew_lease, held.job_id, held.epoch, clock.now(), LEASE)
    clock.advance(sweeper.RESCUE_QUIET_SECONDS - 1)
    assert sweep(engine, clock) == {}
    clock.advance(1)
    assert sweep(engine, clock) == {"queued": 1}


def test_a_live_worker_keeps_a_job_it_has_not_renewed_for_long(engine: Engine, clock: FakeClock) -> None:
    process = a_process("consumer", clock.now(), host="elsewhere", worker=GONE)
    held = running_on(engine, clock)
    clock.advance(LOST_AFTER)
    beat(engine, process, clock.now())
    assert sweep(engine, clock) == {}
    assert job_row(engine, held.job_id).state is State.RUNNING


def test_a_worker_whose_pid_is_gone_from_this_host_is_rescued_after_the_quiet_time(
    engine: Engine, clock: FakeClock
) -> None:
    beat(engine, a_process("consumer", clock.now(), pid=gone_pid(), worker="consumer-here-9"), clock.now())
    held = claimed(engine, new_job(engine), "consumer-here-9", lease=LEASE)
    clock.advance(sweeper.RESCUE_QUIET_SECONDS - 1)
    assert (
        sweep(engine, clock) == {}
    )  # its heartbeat is fresh, its pid gone: the job waits out the quiet time
    clock.advance(1)
    assert sweep(engine, clock) == {"queued": 1}
    assert job_row(engine, held.job_id).state is State.QUEUED


def test_without_the_heartbeat_interval_the_sweep_waits_for_the_lease(
    engine: Engine, clock: FakeClock
) -> None:
    held = running_on(engine, clock)
    clock.advance(LOST_AFTER)
    assert db.transact(engine, sweeper.sweep_expired, clock.now(), backoff=BACKOFF) == {}
    assert job_row(engine, held.job_id).state is State.RUNNING


def test_the_relays_housekeeping_rescues_with_the_deployments_heartbeat(
    engine: Engine, clock: FakeClock, settings_factory: object
) -> None:
    settings: Settings = settings_factory(heartbeat_seconds=HEARTBEAT)  # type: ignore[operator]
    held = running_on(engine, clock)
    clock.advance(LOST_AFTER)
    assert sweep_and_prune(engine, settings).swept == {"queued": 1}
    assert job_row(engine, held.job_id).state is State.QUEUED


def test_a_baseline_workers_sweep_rescues_with_the_deployments_heartbeat(
    engine: Engine, clock: FakeClock, settings_factory: object
) -> None:
    settings: Settings = settings_factory(heartbeat_seconds=HEARTBEAT)  # type: ignore[operator]
    held = running_on(engine, clock, "baseline@elsewhere:7")
    clock.advance(LOST_AFTER)
    SweepLoop(engine, settings, threading.Event()).sweep_once()
    assert job_row(engine, held.job_id).state is State.QUEUED

"""A worker process's registry on the real store (SQLite and PostgreSQL): scrape, act, scrape. The store's
figures are read at each scrape, the instruments move when the code they watch runs, and a role reports
only what it records."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from outbox_bridge.baseline.worker import BaselineProcess
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, fenced, heartbeats
from outbox_bridge.jobstore.heartbeats import this_process
from outbox_bridge.jobstore.states import TERMINAL, State
from outbox_bridge.relay.housekeeping import sweep_and_prune
from outbox_bridge.telemetry.exposition import render
from outbox_bridge.telemetry.instruments import FINISHED_OUTCOMES
from outbox_bridge.worker.attempt import StoreContext, run_attempt
from outbox_bridge.worker.lease import LeaseKeeper
from outbox_bridge.worker.metrics import registry_for
from tests.support.procs import wait_for
from tests.support.scrape import Samples, parse, value
from tests.support.store import claimed, job_row, new_job, new_jobs


def scrape(engine: Engine, settings: Settings, role: str, in_flight: int = 0) -> Samples:
    return parse(render(registry_for(engine, settings, role, in_flight=lambda: in_flight)).decode())


def test_the_store_figures_are_read_at_each_scrape(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    before = scrape(engine, settings, "worker")
    new_jobs(engine, 3)
    db.transact(engine, heartbeats.beat, this_process("worker", clock.now()), clock.now(), forget_before=0.0)
    clock.advance(4.0)
    after = scrape(engine, settings, "worker", in_flight=2)

    assert value(before, "outbox_bridge_jobs", state="queued") == 0
    assert value(after, "outbox_bridge_jobs", state="queued") == 3
    assert value(after, "outbox_bridge_queued_oldest_age_seconds") == 4.0
    assert value(after, "outbox_bridge_outbox_pending") == 3
    assert value(before, "outbox_bridge_processes_alive", role="worker") == 0
    assert value(after, "outbox_bridge_processes_alive", role="worker") == 1
    assert value(after, "outbox_bridge_jobs_in_flight") == 2


def test_a_store_write_and_a_run_move_their_histograms(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    before = scrape(engine, settings, "worker")
    [job_id] = new_jobs(engine, 1, kind="noop")
    clock.advance(2.5)
    claim = claimed(engine, job_id)
    keeper = LeaseKeeper(engine, settings)
    run_attempt(StoreContext(engine, settings, claim, keeper.hold(claim)))
    after = scrape(engine, settings, "worker")

    writes = "outbox_bridge_store_write_seconds_count"
    assert value(after, writes) >= value(before, writes) + 2
    runs = "outbox_bridge_job_run_seconds_count"
    assert value(after, runs, kind="noop") == value(before, runs, kind="noop") + 1
    waits = "outbox_bridge_job_accept_to_start_seconds"
    assert value(after, f"{waits}_count", kind="noop") == value(before, f"{waits}_count", kind="noop") + 1
    assert value(after, f"{waits}_sum", kind="noop") - value(before, f"{waits}_sum", kind="noop") == 2.5


def test_each_role_reports_only_what_it_records(engine: Engine, settings: Settings) -> None:
    def names(role: str) -> set[str]:
        return {name for name, _ in scrape(engine, settings, role)}

    relay, consumer, worker = names("relay"), names("consumer"), names("worker")
    assert "outbox_bridge_relay_confirm_seconds_count" in relay - consumer - worker
    assert "outbox_bridge_deliveries_total" in consumer - relay - worker
    assert "outbox_bridge_jobs_in_flight" in (consumer & worker) - relay
    assert "outbox_bridge_broker_reconnects_total" in (relay & consumer) - worker
    assert "outbox_bridge_store_write_seconds_count" in relay & consumer & worker
    endings = {"outbox_bridge_jobs_finished", "outbox_bridge_job_retries"}  # listed before their first sample
    for role in ("relay", "consumer", "worker"):
        assert endings <= {family.name for family in registry_for(engine, settings, role).collect()}, role


def finished(samples: Samples, kind: str, outcome: str, queue: str = "default") -> float:
    return value(samples, "outbox_bridge_jobs_finished_total", kind=kind, queue=queue, outcome=outcome)


def retries(samples: Samples, kind: str, queue: str = "default") -> float:
    return value(samples, "outbox_bridge_job_retries_total", kind=kind, queue=queue)


@pytest.mark.databases("sqlite")  # the baseline worker's own store; the completer is the consumer's too
def test_each_committed_outcome_counts_its_job_by_kind_queue_and_terminal_state_and_each_retry(
    engine: Engine, settings: Settings
) -> None:
    fast = settings.model_copy(update={"backoff_base_seconds": 0.01, "backoff_max_seconds": 0.01})
    before = scrape(engine, fast, "worker")
    jobs = [
        new_job(engine, "ok-1"),
        new_job(engine, "ok-2"),
        new_job(engine, "second-try", kind="flaky", payload={"fail_until_attempt": 1}),
        new_job(engine, "bad-input", kind="flaky", payload={"fail_until_attempt": 9, "mode": "permanent"}),
        new_job(engine, "always", kind="flaky", payload={}, max_attempts=3),
    ]
    process = BaselineProcess(engine, fast, concurrency=2).start()
    try:
        wait_for(lambda: all(job_row(engine, j).state in TERMINAL for j in jobs), 30, what="every job to end")
    finally:
        process.shutdown()
    after = scrape(engine, fast, "worker")

    assert [job_row(engine, j).state for j in jobs] == [
        State.SUCCEEDED, State.SUCCEEDED, State.SUCCEEDED, State.FAILED, State.DEAD,
    ]  # fmt: skip
    assert finished(after, "noop", "succeeded") - finished(before, "noop", "succeeded") == 2
    moved = {o: finished(after, "flaky", o) - finished(before, "flaky", o) for o in FINISHED_OUTCOMES}
    assert moved == {"succeeded": 1, "failed": 1, "dead": 1, "cancelled": 0, "unknown": 0}
    assert retries(after, "flaky") - retries(before, "flaky") == 1 + 2  # second-try once, always twice
    assert retries(after, "noop") == retries(before, "noop")


def test_the_sweeper_counts_the_jobs_it_ends_and_those_it_queues_again(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    effect = new_job(engine, "effect", kind="notify", payload={"to": "a@example.com", "message": "hi"})
    plain = new_job(engine, "plain", kind="notify", payload={"to": "b@example.com", "message": "hi"})
    held = claimed(engine, effect, "vanished")
    claimed(engine, plain, "vanished")
    db.transact(engine, fenced.mark_external_started, effect, held.epoch, held.attempt_id, clock.now())
    clock.advance(settings.lease_seconds + 1)
    before = scrape(engine, settings, "relay")

    swept = sweep_and_prune(engine, settings).swept
    after = scrape(engine, settings, "relay")

    assert swept == {"unknown": 1, "queued": 1}
    assert finished(after, "notify", "unknown") - finished(before, "notify", "unknown") == 1
    assert retries(after, "notify") - retries(before, "notify") == 1

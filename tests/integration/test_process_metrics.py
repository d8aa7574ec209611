"""A worker process's registry on the real store (SQLite and PostgreSQL): scrape, act, scrape. The store's
figures are read at each scrape, the instruments move when the code they watch runs, and a role reports
only what it records."""

from __future__ import annotations

from sqlalchemy import Engine

from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, heartbeats
from outbox_bridge.jobstore.heartbeats import this_process
from outbox_bridge.telemetry.exposition import render
from outbox_bridge.worker.attempt import StoreContext, run_attempt
from outbox_bridge.worker.lease import LeaseKeeper
from outbox_bridge.worker.metrics import registry_for
from tests.support.scrape import Samples, parse, value
from tests.support.store import claimed, new_jobs


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

"""A queued job whose delivery was lost (dead-lettered after too many redeliveries, or lost with a broker's
data) is announced again by the relay's housekeeping, once per period; jobs that still have a delivery
waiting, or are running, are left alone."""

from __future__ import annotations

from sqlalchemy import Engine, func, select, update

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import claiming, db, sweeper
from outbox_bridge.jobstore import outbox as rows
from outbox_bridge.jobstore.schema import outbox
from outbox_bridge.relay.housekeeping import sweep_and_prune
from tests.support.store import new_job

NOW = 1_700_000_000.0
AFTER = 300.0


def publish_everything(engine: Engine) -> None:
    """What a relay does when the broker confirms: every pending row is marked published."""
    db.transact(engine, lambda conn: conn.execute(update(outbox).values(published_at=NOW + 1)))


def pending(engine: Engine, job_id: str) -> int:
    query = select(func.count()).where(outbox.c.job_id == job_id, outbox.c.published_at.is_(None))
    return int(db.read(engine, lambda conn: conn.execute(query).scalar_one()))


def reannounce(engine: Engine, now: float) -> int:
    return db.transact(engine, sweeper.reannounce_stale, now, older_than=now - AFTER)


def test_a_queued_job_whose_delivery_was_lost_is_announced_again_once_per_period(engine: Engine) -> None:
    job_id = new_job(engine, "lost", now=NOW)
    publish_everything(engine)
    assert reannounce(engine, NOW + AFTER - 1) == 0  # not long enough yet
    assert reannounce(engine, NOW + AFTER + 1) == 1
    assert pending(engine, job_id) == 1
    publish_everything(engine)
    assert reannounce(engine, NOW + AFTER + 2) == 0  # it was just announced
    assert reannounce(engine, NOW + 2 * AFTER + 2) == 1


def test_a_job_with_a_delivery_waiting_or_running_is_not_announced_again(engine: Engine) -> None:
    waiting = new_job(engine, "waiting", now=NOW)
    running = new_job(engine, "running", now=NOW)
    db.transact(engine, claiming.claim, running, "w", NOW + 1, 10 * AFTER)
    db.transact(engine, rows.drop_pending, running)
    assert reannounce(engine, NOW + 10 * AFTER) == 0
    assert pending(engine, waiting) == 1
    assert pending(engine, running) == 0


def test_the_relay_housekeeping_announces_lost_deliveries(settings: Settings, engine: Engine) -> None:
    job_id = new_job(engine, "lost", now=NOW)
    publish_everything(engine)
    soon = settings.model_copy(update={"reannounce_after_seconds": 0.001})
    kept = sweep_and_prune(engine, soon)
    assert kept.reannounced == 1
    assert any("announced 1" in line for line in kept.lines())
    assert pending(engine, job_id) == 1

"""`python -m outbox_bridge.bench.roundtrips`: each hot transaction timed on a real store, and each did its
work."""

from __future__ import annotations

from sqlalchemy import Engine, func, select

from outbox_bridge.bench.roundtrips import STEPS, measure
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.schema import jobs, outbox


def test_each_round_accepts_reads_and_marks_one_job(settings: Settings, engine: Engine) -> None:
    medians = measure(settings, rounds=3, gap=0.0)
    assert set(medians) == set(STEPS) and all(ms > 0 for ms in medians.values())
    counts = db.read(
        engine,
        lambda conn: (
            conn.execute(select(func.count()).select_from(jobs)).scalar_one(),
            conn.execute(select(func.count()).where(outbox.c.published_at.is_not(None))).scalar_one(),
        ),
    )
    assert counts == (3, 3), "three jobs accepted, each outbox row read and marked published"

"""`python -m outbox_bridge.bench.apicpu`: the api's CPU per accepted job, measured over jobs the store
really holds."""

from __future__ import annotations

from sqlalchemy import Engine, func, select

from outbox_bridge.bench.apicpu import TENANT, measure
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.schema import jobs, outbox


def test_every_post_is_an_accepted_job_with_its_outbox_row(settings: Settings, engine: Engine) -> None:
    figures = measure(settings, jobs=40, concurrency=4)
    assert 0 < figures["loop_ms"] <= figures["process_ms"]
    assert figures["per_second"] > 0
    counts = db.read(
        engine,
        lambda conn: (
            conn.execute(select(func.count()).where(jobs.c.tenant == TENANT)).scalar_one(),
            conn.execute(select(func.count()).select_from(outbox)).scalar_one(),
        ),
    )
    assert counts == (80, 80), "40 warming jobs and 40 measured, each a job row and an outbox row"

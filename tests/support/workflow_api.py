"""What the tests of workflows over HTTP share: tokens, ending jobs as a worker would, and counting every
row a refused request must not leave."""

from __future__ import annotations

from sqlalchemy import Engine, func, select

from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, fenced
from outbox_bridge.jobstore.schema import (
    batch_callbacks,
    batch_members,
    batches,
    job_dependencies,
    job_waits,
    jobs,
    outbox,
)
from outbox_bridge.jobstore.states import State
from tests.support.store import claimed

TABLES = (jobs, outbox, job_dependencies, job_waits, batches, batch_members, batch_callbacks)


def headers(settings: Settings, tenant: str = "acme", key: str | None = None) -> dict[str, str]:
    token = issue_token(settings.auth_secret, tenant=tenant, user="alice")
    found = {"Authorization": f"Bearer {token}"}
    if key is not None:
        found["Idempotency-Key"] = key
    return found


def rows(engine: Engine) -> dict[str, int]:
    """How many rows each table a job or batch accept writes holds."""
    with engine.connect() as conn:
        return {t.name: conn.execute(select(func.count()).select_from(t)).scalar_one() for t in TABLES}


def succeed(engine: Engine, clock: FakeClock, job_id: str) -> State:
    held = claimed(engine, job_id, now=clock.now())
    return db.transact(engine, fenced.complete, job_id, held.epoch, held.attempt_id, {}, clock.now())


def fail(engine: Engine, clock: FakeClock, job_id: str) -> None:
    held = claimed(engine, job_id, now=clock.now())
    db.transact(
        engine, fenced.fail, job_id, held.epoch, held.attempt_id, code="boom", message="boom", permanent=True,
        now=clock.now(), backoff=Backoff(1.0, 1.0),
    )  # fmt: skip

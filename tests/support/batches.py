"""Batches and jobs that wait for others, put into a test's store one call each (the store's own
`workflows.accept_batch` and `accept_after`), and their members ended as a worker would end them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from outbox_bridge.core import clock
from outbox_bridge.core.backoff import Backoff
from outbox_bridge.jobstore import db, fenced, intake, workflows
from outbox_bridge.jobstore.workflows import After, Batch, Member
from tests.support.store import claimed


def prepared(key: str, *, tenant: str = "acme", kind: str = "noop", **fields: Any) -> intake.Prepared:
    return intake.prepare(
        tenant=tenant, owner="alice", kind=kind, payload={}, operation_key=key, now=clock.now(),
        max_attempts=1, **fields,
    )  # fmt: skip


def new_batch(engine: Engine, key: str, count: int, *, tenant: str = "acme", callback: bool = True) -> Batch:
    """A batch of `count` noop jobs of `tenant` under the key `key`, with a noop callback unless told not."""
    return db.transact(
        engine, workflows.accept_batch, tenant=tenant, owner="alice", operation_key=key,
        members=[Member(prepared(f"{key}-{i}", tenant=tenant)) for i in range(count)],
        callback=prepared(f"{key}-callback", tenant=tenant, kind="noop") if callback else None,
        now=clock.now(),
    ).batch  # fmt: skip


def new_job_after(engine: Engine, key: str, ids: list[str], *, tenant: str = "acme") -> str:
    """The id of a new job of `tenant` that waits for the jobs `ids` (and is cancelled if one fails)."""
    accepted = db.transact(engine, workflows.accept_after, prepared(key, tenant=tenant), After(tuple(ids)))
    return accepted.job.id


def succeed(engine: Engine, job_id: str) -> None:
    held = claimed(engine, job_id)
    db.transact(engine, fenced.complete, job_id, held.epoch, held.attempt_id, {}, clock.now())


def fail(engine: Engine, job_id: str) -> None:
    held = claimed(engine, job_id)
    db.transact(
        engine, fenced.fail, job_id, held.epoch, held.attempt_id, code="boom", message="boom", permanent=True,
        now=clock.now(), backoff=Backoff(1.0, 1.0),
    )  # fmt: skip


def batch_now(engine: Engine, batch_id: str) -> Batch:
    batch = db.read(engine, workflows.get_batch, batch_id)
    assert batch is not None, f"no batch {batch_id}"
    return batch

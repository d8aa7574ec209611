"""A kind's own policy applied at accept: its queue and attempt budget are fixed on the job, its default
priority applies where a request names none (a request's own still wins), and a kind that sets nothing
keeps the deployment's settings; on both stores, through `enqueue` and the kind's own `.enqueue`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy import Engine

import outbox_bridge
from outbox_bridge import enqueuing
from outbox_bridge.handlers import base
from outbox_bridge.jobstore.priorities import Priority
from tests.integration import test_enqueue
from tests.support.store import job_row

app_engine = test_enqueue.app_engine

SHOP = {"tenant": "shop", "owner": "checkout"}


class Image(BaseModel):
    name: str


@pytest.fixture(autouse=True)
def _deployment_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("OUTBOX_BRIDGE_DEV", "ALLOWED_KINDS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MAX_ATTEMPTS", "3")
    monkeypatch.chdir(Path(__file__).parent)  # no .env here
    enqueuing._settings.cache_clear()
    yield
    enqueuing._settings.cache_clear()


@pytest.fixture
def kinds() -> Iterator[dict[str, Any]]:
    """Two team kinds known to this process for the test only: one with a policy of its own, one without."""
    known, defined_in = dict(base.KINDS), dict(base._DEFINED_IN)

    def resize(ctx: outbox_bridge.JobContext, payload: Image) -> None:
        return None

    def thumbnail(ctx: outbox_bridge.JobContext, payload: Image) -> None:
        return None

    yield {
        "resize": outbox_bridge.kind(
            "team.resize", payload=Image, queue="images", max_attempts=7, priority="high"
        )(resize),
        "thumbnail": outbox_bridge.kind("team.thumbnail", payload=Image)(thumbnail),
    }
    base.KINDS.clear()
    base.KINDS.update(known)
    base._DEFINED_IN.clear()
    base._DEFINED_IN.update(defined_in)


def test_a_kinds_queue_budget_and_priority_are_fixed_on_its_jobs(
    app_engine: Engine, engine: Engine, kinds: dict[str, Any]
) -> None:
    with app_engine.begin() as conn:
        own = kinds["resize"].enqueue(conn, Image(name="a.png"), key="r-1", **SHOP)
        asked_low = kinds["resize"].enqueue(conn, Image(name="b.png"), key="r-2", priority="low", **SHOP)
        plain = kinds["thumbnail"].enqueue(conn, {"name": "a.png"}, key="t-1", **SHOP)
    assert (own.queue, own.priority) == ("images", "high")
    assert (asked_low.queue, asked_low.priority) == ("images", "low")  # the request's own priority wins
    assert (plain.queue, plain.priority) == ("default", "normal")
    rows = {job.id: job_row(engine, job.id) for job in (own, asked_low, plain)}
    assert [(rows[j.id].queue, rows[j.id].max_attempts) for j in (own, asked_low, plain)] == [
        ("images", 7),
        ("images", 7),
        ("default", 3),  # the deployment's MAX_ATTEMPTS
    ]
    assert rows[own.id].priority is Priority.HIGH
    assert rows[own.id].snoozes == 0


def test_the_same_request_again_is_the_same_job_under_the_kinds_default_priority(
    app_engine: Engine, kinds: dict[str, Any]
) -> None:
    """A request that names no priority and one that names the kind's default are different requests
    under one key only if they would make different jobs: both make a `high` job, but the first leaves the
    field unset, so it keeps the fingerprint a request had before kinds had priorities."""
    with app_engine.begin() as conn:
        first = kinds["resize"].enqueue(conn, Image(name="a.png"), key="r-1", **SHOP)
        again = kinds["resize"].enqueue(conn, Image(name="a.png"), key="r-1", **SHOP)
    assert again.id == first.id

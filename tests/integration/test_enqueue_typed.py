"""The typed forms of enqueue: a kind's own function enqueues its model instance, `run_at` is a `datetime`,
and an unknown kind in a process that loaded no kinds of its own says how to load them; all in the
caller's transaction, on the caller's own engine."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Engine

import outbox_bridge
from outbox_bridge import enqueuing
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.handlers import base
from outbox_bridge.handlers.export import ExportPayload
from outbox_bridge.handlers.registry import BUILT_IN
from tests.integration import test_enqueue
from tests.integration.test_enqueue import counts, orders
from tests.support.store import job_row

app_engine = test_enqueue.app_engine  # the application's own engine, with a business table


@pytest.fixture(autouse=True)
def _deployment_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """enqueue reads the deployment's settings from the environment, once: here, a deployment that names
    the kinds these tests enqueue."""
    for name in ("OUTBOX_BRIDGE_DEV", "MAX_ATTEMPTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ALLOWED_KINDS", "export,team.send_receipt")
    monkeypatch.chdir(Path(__file__).parent)  # no .env here
    enqueuing._settings.cache_clear()
    yield
    enqueuing._settings.cache_clear()


SHOP = {"tenant": "shop", "owner": "checkout"}


class Receipt(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    order_id: int = Field(ge=1)
    email: str = Field(max_length=200)
    total_cents: int = Field(default=0, ge=0)


class Refund(BaseModel):
    order_id: int


def run_receipt(ctx: outbox_bridge.JobContext, payload: Receipt) -> dict[str, object]:
    return {"sent_to": payload.email}


@pytest.fixture
def send_receipt() -> Iterator[Any]:
    """A team's kind, `team.send_receipt`, known to this process for the test only."""
    kinds, defined_in = dict(base.KINDS), dict(base._DEFINED_IN)
    yield outbox_bridge.kind("team.send_receipt", payload=Receipt)(run_receipt)
    base.KINDS.clear()
    base.KINDS.update(kinds)
    base._DEFINED_IN.clear()
    base._DEFINED_IN.update(defined_in)


def test_a_kind_function_stays_callable_and_enqueues_its_model_in_the_callers_transaction(
    app_engine: Engine, engine: Engine, send_receipt: Any
) -> None:
    assert send_receipt is run_receipt  # the same function, called as before
    assert send_receipt(None, Receipt(order_id=1, email="ann@example.com")) == {"sent_to": "ann@example.com"}
    receipt = Receipt(order_id=7, email="ann@example.com")
    with app_engine.connect() as conn, conn.begin() as transaction:
        conn.execute(orders.insert().values(item="book"))
        job = send_receipt.enqueue(conn, receipt, key="receipt-7", **SHOP)
        assert (job.kind, job.state) == ("team.send_receipt", "queued")
        transaction.rollback()
    assert counts(app_engine) == (0, 0, 0)
    with app_engine.begin() as conn:
        conn.execute(orders.insert().values(item="book"))
        job = send_receipt.enqueue(conn, receipt, key="receipt-7", **SHOP)
    assert counts(app_engine) == (1, 1, 1)
    assert job_row(engine, job.id).payload == {"order_id": 7, "email": "ann@example.com", "total_cents": 0}


def test_a_model_instance_and_the_same_dict_are_one_request(app_engine: Engine, send_receipt: Any) -> None:
    with app_engine.begin() as conn:
        first = send_receipt.enqueue(conn, Receipt(order_id=7, email="a@b.c"), key="r-7", **SHOP)
    with app_engine.begin() as conn:
        again = send_receipt.enqueue(conn, {"order_id": 7, "email": "a@b.c"}, key="r-7", **SHOP)
        by_name = outbox_bridge.enqueue(
            conn, "team.send_receipt", Receipt(order_id=7, email="a@b.c"), key="r-7", **SHOP
        )
    assert first.id == again.id == by_name.id
    assert counts(app_engine) == (0, 1, 1)


def test_a_built_in_kind_takes_its_model_instance_by_name(app_engine: Engine, engine: Engine) -> None:
    with app_engine.begin() as conn:
        payload = ExportPayload(rows=10, chunk=5)
        job = outbox_bridge.enqueue(conn, "export", payload, key="export-1", **SHOP)
    assert job_row(engine, job.id).payload == {"rows": 10, "chunk": 5}


def test_a_model_of_another_kind_is_refused_naming_both_and_writes_nothing(
    app_engine: Engine, send_receipt: Any
) -> None:
    with pytest.raises(
        outbox_bridge.InvalidJob, match=r"is a Refund; the kind team\.send_receipt takes a Receipt"
    ):
        with app_engine.begin() as conn:
            send_receipt.enqueue(conn, Refund(order_id=7), key="r-7", **SHOP)
    assert counts(app_engine) == (0, 0, 0)


def test_an_aware_datetime_run_at_is_the_instant_it_names_and_the_same_request_as_its_text(
    app_engine: Engine, send_receipt: Any, clock: FakeClock
) -> None:
    start = datetime.fromtimestamp(clock.now() + 3600, tz=timezone(timedelta(hours=5, minutes=30)))
    receipt = Receipt(order_id=7, email="a@b.c")
    with app_engine.begin() as conn:
        job = send_receipt.enqueue(conn, receipt, key="r-7", run_at=start, **SHOP)
    assert job.run_at == start
    text = start.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    with app_engine.begin() as conn:
        again = outbox_bridge.enqueue(conn, "team.send_receipt", receipt, key="r-7", run_at=text, **SHOP)
    assert again.id == job.id


def test_a_naive_datetime_run_at_is_refused_and_writes_nothing(
    app_engine: Engine, send_receipt: Any, clock: FakeClock
) -> None:
    naive = datetime.fromtimestamp(clock.now() + 3600, tz=UTC).replace(tzinfo=None)
    with pytest.raises(outbox_bridge.InvalidJob, match="naive datetime") as refused:
        with app_engine.begin() as conn:
            send_receipt.enqueue(conn, {"order_id": 7, "email": "a@b.c"}, key="r-7", run_at=naive, **SHOP)
    assert refused.value.errors[0]["loc"] == ["run_at"]
    assert counts(app_engine) == (0, 0, 0)


def test_an_unknown_kind_without_kinds_of_ones_own_loaded_says_to_load_them(
    app_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in set(base.KINDS) - set(BUILT_IN):  # what other tests of this process defined
        monkeypatch.delitem(base.KINDS, name)
    with pytest.raises(outbox_bridge.InvalidJob, match="OUTBOX_BRIDGE_KINDS") as refused:
        with app_engine.begin() as conn:
            outbox_bridge.enqueue(conn, "team.send_receipt", {"order_id": 7}, key="r-7", **SHOP)
    assert "import the module that defines them" in str(refused.value)
    assert counts(app_engine) == (0, 0, 0)


def test_an_unknown_kind_beside_kinds_of_ones_own_names_only_what_is_accepted(
    app_engine: Engine, send_receipt: Any
) -> None:
    with pytest.raises(outbox_bridge.InvalidJob) as refused, app_engine.begin() as conn:
        outbox_bridge.enqueue(conn, "team.send_refund", {"order_id": 7}, key="r-7", **SHOP)
    assert "team.send_receipt" in str(refused.value) and "OUTBOX_BRIDGE_KINDS" not in str(refused.value)

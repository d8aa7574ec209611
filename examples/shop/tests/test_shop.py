"""The shop's kinds, tested inline with outbox-bridge's helpers: no broker, no processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import shop.kinds  # noqa: F401  (registers the shop's kinds)
from shop.orders import metadata, orders, place_order
from sqlalchemy import create_engine, func, select

from outbox_bridge import InvalidJob
from outbox_bridge.testing import InlineJobs


@pytest.fixture(autouse=True)
def mailbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    box = tmp_path / "mailbox.jsonl"
    monkeypatch.setenv("SHOP_MAILBOX", str(box))
    return box


def test_a_receipt_is_sent_once(inline_jobs: InlineJobs, mailbox: Path) -> None:
    job = inline_jobs.submit(
        "shop.send_receipt", {"order_id": 1, "email": "a@example.com", "total_cents": 500}
    )
    assert inline_jobs.run_to_end(job.id).state == "succeeded"
    assert inline_jobs.result(job.id) == {"sent_to": "a@example.com", "order_id": 1}
    assert [json.loads(line)["order"] for line in mailbox.read_text().splitlines()] == [1]


def test_an_order_of_nothing_fails_without_a_retry(inline_jobs: InlineJobs) -> None:
    job = inline_jobs.submit("shop.send_receipt", {"order_id": 2, "email": "a@example.com", "total_cents": 0})
    done = inline_jobs.run_to_end(job.id)
    assert (done.state, done.attempts) == ("failed", 1)


def test_a_worker_lost_once_sending_began_leaves_the_receipt_unknown(
    inline_jobs: InlineJobs, mailbox: Path
) -> None:
    job = inline_jobs.submit("shop.send_receipt", {"order_id": 3, "email": "a@example.com", "total_cents": 1})
    assert inline_jobs.run(job.id, crash_after_external_start=True).state.value == "unknown"
    assert not mailbox.exists()  # it was lost before it wrote: an operator decides what happened


def test_an_order_and_its_receipt_commit_together_or_not_at_all(inline_jobs: InlineJobs) -> None:
    engine = create_engine(inline_jobs.settings.database_url)
    metadata.create_all(engine)
    _, job = place_order(engine, item="book", email="b@example.com", total_cents=1200)
    assert inline_jobs.job(job.id).state == "queued"
    with pytest.raises(InvalidJob):
        place_order(engine, item="pen", email="not an address", total_cents=100)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(orders)).scalar_one() == 1
    assert inline_jobs.run_to_end(job.id).state == "succeeded"
    engine.dispose()

"""`outbox-bridge batches list|show` as an operator runs them, on each database: batches newest first with
their members' counts and callback job, filtered by tenant and state, a page at a time; one batch with each
member's state in the request's order and its callback job; an unknown id (or another tenant's, with
--tenant) is one line, exit 1. `/metrics` counts the batches running and done, read at each scrape."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Engine
from typer.testing import CliRunner

from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.telemetry.exposition import render
from outbox_bridge.worker.metrics import registry_for
from tests.support.batches import batch_now, fail, new_batch, succeed
from tests.support.cli import done, invoke, refused, runner
from tests.support.scrape import parse, value


@pytest.fixture
def cli(settings: Settings, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    return runner(settings, monkeypatch, "olga")


def test_list_shows_batches_newest_first_with_counts_and_callback_and_filters_them(
    cli: CliRunner, engine: Engine, clock: FakeClock
) -> None:
    first = new_batch(engine, "first", 3)
    clock.advance(1)
    second = new_batch(engine, "second", 2, tenant="globex", callback=False)
    clock.advance(1)
    for job_id in first.jobs:
        succeed(engine, job_id)
    fail(engine, next(iter(second.jobs)))
    first = batch_now(engine, first.id)

    listed = json.loads(done(invoke(cli, "batches", "list", "--json")))["items"]
    text = done(invoke(cli, "batches", "list"))

    assert [b["id"] for b in listed] == [second.id, first.id]
    newest, oldest = listed
    assert (newest["tenant"], newest["state"], newest["counts"]) == (
        "globex",
        "running",
        {"queued": 1, "failed": 1},
    )
    assert (newest["callback_job_id"], newest["done_at"]) == (None, None)
    assert (oldest["state"], oldest["counts"], oldest["jobs"]) == ("done", {"succeeded": 3}, list(first.jobs))
    assert oldest["callback_job_id"] == first.callback_job_id is not None
    assert oldest["done_at"].endswith("Z") and oldest["owner"] == "alice"
    line = next(row for row in text.splitlines() if row.split()[:1] == [first.id])
    assert line.split()[1:5] == ["acme", "done", "3", "succeeded=3"] and first.callback_job_id in line

    def ids(*options: str) -> list[str]:
        return [
            b["id"] for b in json.loads(done(invoke(cli, "batches", "list", "--json", *options)))["items"]
        ]

    assert ids("--tenant", "acme") == [first.id]
    assert ids("--state", "running") == [second.id]
    assert ids("--state", "done", "--tenant", "globex") == []
    page = json.loads(done(invoke(cli, "batches", "list", "--json", "--limit", "1")))
    assert [b["id"] for b in page["items"]] == [second.id] and page["next_cursor"]
    assert ids("--limit", "1", "--cursor", page["next_cursor"]) == [first.id]
    assert json.loads(done(invoke(cli, "batches", "list", "--json")))["next_cursor"] is None
    assert "--cursor is not a next_cursor" in refused(invoke(cli, "batches", "list", "--cursor", "nope"))
    assert invoke(cli, "batches", "list", "--state", "finished").returncode == 2


def test_show_lists_each_member_with_its_state_and_the_callback_job(
    cli: CliRunner, engine: Engine, clock: FakeClock
) -> None:
    batch = new_batch(engine, "nightly", 3)
    members = list(batch.jobs)
    succeed(engine, members[0])
    fail(engine, members[1])

    running = json.loads(done(invoke(cli, "batches", "show", batch.id, "--json")))
    text = done(invoke(cli, "batches", "show", batch.id))
    succeed(engine, members[2])
    finished = json.loads(
        done(invoke(cli, "batches", "show", batch.id.upper(), "--tenant", "acme", "--json"))
    )
    finished_text = done(invoke(cli, "batches", "show", batch.id))

    assert running["batch"]["state"] == "running" and running["callback"] is None
    assert [(m["id"], m["state"]) for m in running["members"]] == [
        (members[0], "succeeded"), (members[1], "failed"), (members[2], "queued")
    ]  # fmt: skip
    assert running["members"][1]["error"]["code"] == "boom" and running["members"][0]["tenant"] == "acme"
    assert "counts: queued=1 succeeded=1 failed=1" in " ".join(text.split())
    assert "accepted once every member has ended" in text
    rows = [line.split() for line in text.splitlines() if any(m in line for m in members)]
    assert [row[:4] for row in rows] == [
        ["0", members[0], "noop", "succeeded"], ["1", members[1], "noop", "failed"],
        ["2", members[2], "noop", "queued"],
    ]  # fmt: skip
    assert finished["batch"]["state"] == "done"
    callback = finished["callback"]
    assert callback["id"] == finished["batch"]["callback_job_id"] and callback["state"] == "queued"
    assert f"callback job: {callback['id']} (noop, queued)" in " ".join(finished_text.split())


def test_show_of_an_unknown_batch_or_another_tenants_says_so_in_one_line(
    cli: CliRunner, engine: Engine
) -> None:
    batch = new_batch(engine, "nightly", 1)

    unknown = refused(invoke(cli, "batches", "show", "8a26491b-0000-4000-8000-000000000000"))
    foreign = refused(invoke(cli, "batches", "show", batch.id, "--tenant", "globex"))

    assert "no batch '8a26491b-0000-4000-8000-000000000000'" in unknown
    assert "`outbox-bridge batches list` shows the ids there are" in unknown
    assert f"no batch {batch.id!r} of tenant 'globex'" in foreign


def test_metrics_count_the_batches_running_and_done_at_each_scrape(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    def scrape() -> dict[str, float]:
        samples = parse(render(registry_for(engine, settings, "worker", in_flight=lambda: 0)).decode())
        return {state: value(samples, "outbox_bridge_batches", state=state) for state in ("running", "done")}

    before = scrape()
    one, two = new_batch(engine, "one", 2), new_batch(engine, "two", 1)
    while_running = scrape()
    succeed(engine, next(iter(two.jobs)))
    after = scrape()

    assert before == {"running": 0, "done": 0}
    assert while_running == {"running": 2, "done": 0}
    assert after == {"running": 1, "done": 1}
    assert batch_now(engine, one.id).state == "running"

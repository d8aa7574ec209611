"""`outbox-bridge schedules add --if-missing` exits 0 when the schedule exists as asked (a deployment script
that adds it at every run) and still refuses one of the name defined otherwise, naming what differs;
`schedules list` (text and --json) and the dashboard's schedules page mark the schedules declared in code."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from typer.testing import CliRunner

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.recurrence import CatchUp, Recurrence
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, schedules
from outbox_bridge.jobstore.priorities import Priority
from outbox_bridge.jobstore.schema import schedule_actions
from outbox_bridge.jobstore.schema import schedules as schedule_rows
from tests.integration.test_dashboard_schedules import row_of
from tests.support.cli import done, invoke, refused, rows, runner

ADD = ["schedules", "add", "--tenant", "acme", "--name", "nightly", "--kind", "export"]
EXPORT = '{"rows": 10, "chunk": 5}'
ASKED = [*ADD, "--every", "1h", "--payload", EXPORT, "--catch-up", "none", "--if-missing"]


@pytest.fixture
def cli(settings: Settings, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    return runner(settings, monkeypatch, "olga")


def test_if_missing_adds_a_missing_schedule_and_exits_0_when_it_exists_as_asked(
    cli: CliRunner, engine: Engine
) -> None:
    added = done(invoke(cli, *ASKED))
    db.transact(engine, schedules.pause, "acme", "nightly", 0.0, actor="olga")  # paused or not, it exists
    again = done(invoke(cli, *ASKED[:-1], "--priority", "normal", "--if-missing"))

    assert added.startswith("added: schedule acme/nightly;")
    assert again.strip() == "exists: schedule acme/nightly, as asked"
    (stored,) = rows(engine, schedule_rows)
    assert (stored["every_seconds"], stored["paused_by"]) == (3600, "olga")
    assert [r["action"] for r in rows(engine, schedule_actions)] == ["add", "pause"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (["--every", "2h"], "--cron/--every/--timezone"),
        (["--payload", '{"rows": 11, "chunk": 5}'], "--payload"),
        (["--priority", "high"], "--priority"),
        (["--catch-up", "latest"], "--catch-up"),
        (["--concurrency-key", "exports"], "--concurrency-key"),
        (
            ["--kind", "notify", "--payload", '{"to": "ops@example.com", "message": "hi"}'],
            "--kind, --payload",
        ),
    ],
)
def test_if_missing_still_refuses_a_schedule_of_the_name_defined_otherwise(
    cli: CliRunner, engine: Engine, change: list[str], named: str
) -> None:
    done(invoke(cli, *ASKED))
    said = refused(invoke(cli, *ASKED, *change))

    assert said == (
        f"outbox-bridge: tenant acme already has a schedule named nightly, defined otherwise ({named}) "
        "(`outbox-bridge schedules list`)"
    )
    (stored,) = rows(engine, schedule_rows)
    assert stored["every_seconds"] == 3600 and stored["kind"] == "export"


def test_without_if_missing_an_existing_schedule_is_refused_as_before(cli: CliRunner) -> None:
    done(invoke(cli, *ASKED))
    assert refused(invoke(cli, *ASKED[:-1])) == (
        "outbox-bridge: tenant acme already has a schedule named nightly (`outbox-bridge schedules list`)"
    )


def declared_and_not(engine: Engine, clock: FakeClock) -> None:
    for name, declared in (("from-code", True), ("by-hand", False)):
        db.transact(
            engine, schedules.add, tenant="acme", name=name, kind="export", payload={"rows": 1, "chunk": 1},
            priority=Priority.NORMAL, recurrence=Recurrence(every_seconds=60), catch_up=CatchUp.LATEST,
            now=clock.now(), actor="olga", declared=declared,
        )  # fmt: skip


def test_list_marks_the_schedules_declared_in_code(cli: CliRunner, engine: Engine, clock: FakeClock) -> None:
    declared_and_not(engine, clock)
    listed = json.loads(done(invoke(cli, "schedules", "list", "--json")))["schedules"]
    text = done(invoke(cli, "schedules", "list"))

    assert {s["name"]: s["declared"] for s in listed} == {"by-hand": False, "from-code": True}
    assert "in code" in text
    marks = {line.split()[1]: line.split()[2] for line in text.splitlines() if "acme" in line}
    assert marks == {"by-hand": "export", "from-code": "yes"}, text


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings), follow_redirects=False) as test_client:
        yield test_client


def test_the_dashboards_schedules_page_marks_the_schedules_declared_in_code(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    declared_and_not(engine, clock)
    token = issue_token(settings.auth_secret, tenant="ops", user="olga", operator=True)
    page = client.get("/ui/schedules", headers={"Authorization": f"Bearer {token}"}).text

    assert "in code" in row_of(page, "data-schedule", "acme/from-code")
    assert "in code" not in row_of(page, "data-schedule", "acme/by-hand")

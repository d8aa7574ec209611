"""`outbox-bridge schedules` and `outbox-bridge kinds pause|resume` as an operator runs them: `add` checks
everything a slot's job needs before it writes (a refusal is one line, exit 1, and leaves no row), `list`
shows each schedule's next slot and last fired slot, each change is recorded with the OS user; `status`
(text and --json) and `/metrics` show the schedules' next slots, the age of a slot due and not fired, and
the paused kinds since when."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, update
from typer.testing import CliRunner

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.overview import store_figures
from outbox_bridge.jobstore.schema import kind_actions, paused_kinds, schedule_actions, schedules
from outbox_bridge.telemetry.exposition import StoreCollector, render
from tests.support.cli import Ran, done, invoke, refused, rows, runner

OPERATOR = "olga"
ADD = ["schedules", "add", "--tenant", "acme", "--name", "nightly", "--kind", "export"]
EXPORT = '{"rows": 10, "chunk": 5}'


@pytest.fixture
def cli(settings: Settings, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """The command line run in this process, with the test's settings in the environment, as the OS user
    `OPERATOR`, on the test's migrated store."""
    return runner(settings, monkeypatch, OPERATOR)


def run(cli: CliRunner, *args: str) -> Ran:
    return invoke(cli, *args)


def test_add_keeps_the_payload_as_the_kind_reads_it_and_list_shows_the_next_slot(
    cli: CliRunner, engine: Engine
) -> None:
    said = done(
        run(cli, *ADD, "--every", "1h", "--payload", EXPORT, "--priority", "low", "--catch-up", "none")
    )
    listed = json.loads(done(run(cli, "schedules", "list", "--json")))["schedules"]
    text = done(run(cli, "schedules", "list"))

    assert said.startswith("added: schedule acme/nightly; a job of kind export every 1h, the first at ")
    (stored,) = rows(engine, schedules)
    assert (stored["every_seconds"], stored["cron"], stored["catch_up"], stored["created_by"]) == (
        3600,
        None,
        "none",
        OPERATOR,
    )
    assert json.loads(stored["payload"]) == {"rows": 10, "chunk": 5}
    (shown,) = listed
    assert (shown["name"], shown["kind"], shown["priority"], shown["paused"]) == (
        "nightly",
        "export",
        "low",
        False,
    )
    assert shown["next_slot"].endswith(":00:00Z") and shown["due_seconds"] is None
    assert shown["last_fired_slot"] is None
    assert "acme" in text and "nightly" in text and "every 1h" in text and "active" in text


def test_a_cron_schedule_keeps_its_time_zone(cli: CliRunner, engine: Engine) -> None:
    done(run(cli, *ADD, "--cron", "0 9 * * 1-5", "--timezone", "Europe/Berlin", "--payload", EXPORT))
    (stored,) = rows(engine, schedules)
    assert (stored["cron"], stored["timezone"], stored["every_seconds"]) == (
        "0 9 * * 1-5",
        "Europe/Berlin",
        None,
    )


@pytest.mark.databases("sqlite")
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--every", "1m", "--payload", "{}", "--kind", "resize"], "accepts these kinds"),
        (["--every", "1m", "--payload", '{"rows": 2000000, "chunk": 5}'], "not a valid export payload"),
        (["--every", "1m", "--payload", "{rows: 1}"], "--payload is not JSON"),
        (["--every", "1m", "--payload", "[1]"], "--payload"),
        (["--cron", "0 25 * * *", "--payload", EXPORT], "not a cron expression"),
        (["--cron", "0 9 * * *", "--timezone", "Europe/Atlantis", "--payload", EXPORT], "not a time zone"),
        (["--every", "1m", "--timezone", "UTC", "--payload", EXPORT], "a time zone goes with a cron"),
        (["--every", "1m", "--cron", "* * * * *", "--payload", EXPORT], "not both"),
        (["--payload", EXPORT], "not both and not neither"),
        (["--every", "soon", "--payload", EXPORT], "--every 'soon' is not a duration"),
        (["--every", "1m", "--payload", EXPORT, "--tenant", "a b"], "--tenant must be"),
        (
            ["--cron", "0 0 30 2 *", "--payload", EXPORT],
            "--cron: '0 0 30 2 *' has no slot in the next 10 years",
        ),
        (["--cron", "0 0 31 4 *", "--payload", EXPORT], "it would never fire"),
        (
            ["--cron", "0 9 * * *", "--timezone", "A" * 5000, "--payload", EXPORT],
            "--timezone: a time zone is an IANA name of at most 64 characters",
        ),
        (["--cron", "R R * * *", "--payload", EXPORT], "random or hashed minute ('R')"),
        (["--cron", "0 H * * *", "--payload", EXPORT], "one job per slot needs fixed slots"),
        (["--cron", "0 9 * * * 30", "--payload", EXPORT], "not a cron expression of five fields"),
        (
            ["--every", "1m", "--payload", '{"rows": 10, "x": ' + "[" * 100_000 + "]" * 100_000 + "}"],
            "The payload is nested more than 32 levels deep",
        ),
    ],
)
def test_add_refuses_in_one_line_and_writes_nothing(
    cli: CliRunner, engine: Engine, args: list[str], says: str
) -> None:
    said = refused(run(cli, *ADD, *args))
    assert says in said
    assert rows(engine, schedules) == [] and rows(engine, schedule_actions) == []


def test_a_second_schedule_of_the_same_name_is_refused(cli: CliRunner, engine: Engine) -> None:
    done(run(cli, *ADD, "--every", "1h", "--payload", EXPORT))
    assert "already has a schedule named nightly" in refused(
        run(cli, *ADD, "--every", "5m", "--payload", EXPORT)
    )
    assert [r["every_seconds"] for r in rows(engine, schedules)] == [3600]


def test_pause_resume_and_remove_are_recorded_with_the_os_user(cli: CliRunner, engine: Engine) -> None:
    done(run(cli, *ADD, "--every", "1h", "--payload", EXPORT))
    assert done(run(cli, "schedules", "pause", "nightly", "--tenant", "acme")).startswith("paused:")
    assert json.loads(done(run(cli, "schedules", "list", "--json")))["schedules"][0]["paused_by"] == OPERATOR
    assert done(run(cli, "schedules", "resume", "nightly", "--tenant", "acme")).startswith("resumed:")
    done(run(cli, "schedules", "remove", "nightly", "--tenant", "acme"))

    assert "no schedule named nightly" in refused(
        run(cli, "schedules", "pause", "nightly", "--tenant", "acme")
    )
    assert [(r["action"], r["actor"]) for r in rows(engine, schedule_actions)] == [
        ("add", OPERATOR), ("pause", OPERATOR), ("resume", OPERATOR), ("remove", OPERATOR)
    ]  # fmt: skip


def test_status_and_metrics_show_a_slot_due_and_not_fired_and_its_age(
    cli: CliRunner, engine: Engine, settings: Settings
) -> None:
    done(run(cli, *ADD, "--every", "1h", "--payload", EXPORT))
    overdue = clock.now() - 42
    db.transact(engine, lambda conn: conn.execute(update(schedules).values(next_slot_at=overdue)))

    status = run(cli, "status", "--json")
    text = run(cli, "status").stdout
    registry = CollectorRegistry()
    registry.register(
        StoreCollector(lambda: db.read(engine, store_figures, clock.now(), settings.alive_within_seconds))
    )
    metrics = render(registry).decode()

    (shown,) = json.loads(status.stdout)["schedules"]
    assert 42 <= shown["due_seconds"] < 60
    assert "nightly" in text and ("42s ago" in text or "43s ago" in text), text
    labels = '{schedule="nightly",tenant="acme"}'
    assert 42 <= gauge(metrics, f"outbox_bridge_schedule_due_age_seconds{labels}") < 60
    assert gauge(metrics, f"outbox_bridge_schedule_next_slot_timestamp_seconds{labels}") == overdue


def gauge(metrics: str, series: str) -> float:
    (value,) = [line.split()[-1] for line in metrics.splitlines() if line.startswith(f"{series} ")]
    return float(value)


def test_kinds_pause_and_resume_are_recorded_and_shown_by_status_and_metrics(
    cli: CliRunner, engine: Engine, settings: Settings
) -> None:
    assert "runs no kind 'exports'" in refused(run(cli, "kinds", "pause", "exports"))
    assert rows(engine, paused_kinds) == []

    said = done(run(cli, "kinds", "pause", "export", "--note", "provider down"))
    assert done(run(cli, "kinds", "pause", "export")).startswith("already paused")
    document = json.loads(run(cli, "status", "--json").stdout)
    text = run(cli, "status").stdout
    figures = db.read(engine, store_figures, clock.now(), settings.alive_within_seconds)
    registry = CollectorRegistry()
    registry.register(StoreCollector(lambda: figures))
    metrics = render(registry).decode()

    assert said.startswith("paused: kind export")
    (paused,) = document["paused_kinds"]
    assert (paused["kind"], paused["paused_by"], paused["note"], paused["queued"]) == (
        "export",
        OPERATOR,
        "provider down",
        0,
    )
    assert "paused kinds: export (since" in text
    assert gauge(
        metrics, 'outbox_bridge_kind_paused_since_timestamp_seconds{kind="export"}'
    ) == pytest.approx(clock.now(), abs=60)
    assert done(run(cli, "kinds", "resume", "export")).startswith("resumed: kind export")
    assert done(run(cli, "kinds", "resume", "export")).startswith("not paused")
    assert [(r["kind"], r["action"], r["actor"]) for r in rows(engine, kind_actions)] == [
        ("export", "pause", OPERATOR), ("export", "resume", OPERATOR)
    ]  # fmt: skip
    assert json.loads(done(run(cli, "kinds", "--json")))["kinds"], "the kinds are listed as before"


def test_add_takes_a_concurrency_key_for_every_job_and_refuses_one_post_jobs_would_refuse(
    cli: CliRunner, engine: Engine
) -> None:
    done(run(cli, *ADD, "--every", "1h", "--payload", EXPORT, "--concurrency-key", "nightly-export"))
    (stored,) = rows(engine, schedules)
    assert stored["concurrency_key"] == "nightly-export"
    (listed,) = json.loads(done(run(cli, "schedules", "list", "--json")))["schedules"]
    assert listed["concurrency_key"] == "nightly-export"
    assert "nightly-export" in done(run(cli, "schedules", "list"))

    said = refused(run(cli, *ADD[:5], "other", *ADD[6:], "--every", "1h", "--payload", EXPORT,
                       "--concurrency-key", "k" * 129))  # fmt: skip
    assert said.endswith("--concurrency-key: String should have at most 128 characters")
    assert len(rows(engine, schedules)) == 1

"""`outbox-bridge jobs prune [--older-than DURATION] [--dry-run]` as an operator runs it: what it says it
removed is what went, a dry run removes nothing, and a bad duration or a missing store is one line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import Engine

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, operator
from tests.conftest import make_settings
from tests.integration.test_cli_errors import assert_one_line
from tests.support import procs
from tests.support.retention import files_under, lost, succeeded, table_ids
from tests.support.store import every_row, new_job

DAY = 86_400.0


def prune(settings: Settings, *args: str, **env: str) -> str:
    result = procs.run(["jobs", "prune", *args], settings, **env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not result.stderr, result.stderr
    return result.stdout


@pytest.fixture
def stocked(engine: Engine, settings: Settings) -> dict[str, str]:
    """Jobs finished 30 days ago (an export with its file, a cancelled job), an `unknown` one as old, and an
    export that finished yesterday."""
    now = time.time()
    old = now - 30 * DAY
    cancelled = new_job(engine, "old-cancelled", now=old)
    db.transact(engine, operator.request_cancel, cancelled, old)
    return {
        "old": succeeded(engine, settings, "old-export", old),
        "cancelled": cancelled,
        "unknown": lost(engine, settings, "old-unknown", old, external=True)[0],
        "young": succeeded(engine, settings, "young-export", now - DAY),
    }


def test_prune_removes_jobs_finished_longer_ago_than_the_retention_and_says_how_many(
    settings: Settings, engine: Engine, stocked: dict[str, str]
) -> None:
    said = prune(settings)

    assert "removed 2 jobs finished more than 7d ago" in said, said
    assert "and 1 of their files" in said, said
    # The unknown job's lost attempt wrote a file that never became a result.
    assert "removed 1 files of attempts that never became a result" in said, said
    assert table_ids(engine)["jobs"] == {stocked["unknown"], stocked["young"]}
    assert not (settings.results_dir / stocked["old"]).exists()
    assert any(settings.results_dir.joinpath(stocked["young"]).iterdir())


def test_older_than_overrides_the_retention(
    settings: Settings, engine: Engine, stocked: dict[str, str]
) -> None:
    said = prune(settings, "--older-than", "12h")

    assert "removed 3 jobs finished more than 12h ago" in said, said
    assert table_ids(engine)["jobs"] == {stocked["unknown"]}


def test_a_dry_run_says_what_would_go_and_removes_nothing(
    settings: Settings, engine: Engine, stocked: dict[str, str]
) -> None:
    rows, files = every_row(engine), files_under(settings.results_dir)

    said = prune(settings, "--dry-run")

    assert "would remove 2 jobs finished more than 7d ago" in said, said
    assert "would remove 1 files of attempts" in said, said
    assert "dry run: nothing was removed" in said, said
    assert every_row(engine) == rows
    assert files_under(settings.results_dir) == files


def test_a_retention_of_zero_keeps_finished_jobs(
    settings: Settings, engine: Engine, stocked: dict[str, str]
) -> None:
    said = prune(settings, JOB_RETENTION_SECONDS="0")

    assert "finished jobs are kept: JOB_RETENTION_SECONDS is 0" in said, said
    assert len(table_ids(engine)["jobs"]) == 4


@pytest.mark.parametrize("duration", ["7x", "0s", "-1d", "soon"])
def test_a_bad_duration_is_one_line_and_removes_nothing(
    settings: Settings, engine: Engine, stocked: dict[str, str], duration: str
) -> None:
    rows = every_row(engine)

    result = procs.run(["jobs", "prune", "--older-than", duration], settings)

    assert_one_line(result, "--older-than", "7d, 12h, 30m, 90s")
    assert every_row(engine) == rows


@pytest.mark.databases("sqlite")
def test_prune_before_db_init_says_to_run_it_and_creates_no_store(tmp_path: Path) -> None:
    path = tmp_path / "data" / "jobs.db"

    result = procs.run(["jobs", "prune"], make_settings(tmp_path, database_url=f"sqlite:///{path}"))

    assert_one_line(result, "no store at", "outbox-bridge db init")
    assert not path.exists()

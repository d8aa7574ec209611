"""Every operator command that cannot do its work says so in one line (what is wrong, what to run) and
exits non-zero: no traceback, and no store left behind, since only `db init` creates one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import make_settings
from tests.support import procs

# These run against stores that are missing or unreachable on purpose; the parametrized store is not used.
pytestmark = pytest.mark.databases("sqlite")

OPERATOR_COMMANDS = [
    ["status"],
    ["status", "--json"],
    ["jobs", "list", "--json"],
    ["jobs", "list"],
    ["jobs", "show", "8a26491b"],
    ["jobs", "requeue", "8a26491b"],
    ["jobs", "resolve", "8a26491b", "--outcome", "failed"],
    ["db", "upgrade"],
]


def assert_one_line(result: subprocess.CompletedProcess[str], *phrases: str) -> str:
    said = (result.stdout + result.stderr).strip()
    assert result.returncode == 1, said
    assert "Traceback" not in said, said
    assert len(said.splitlines()) == 1, f"one line, not {len(said.splitlines())}:\n{said}"
    assert said.startswith("outbox-bridge: "), said
    for phrase in phrases:
        assert phrase in said, said
    return said


@pytest.mark.parametrize("command", OPERATOR_COMMANDS, ids=" ".join)
def test_command_before_db_init_says_to_run_it_and_creates_no_store(
    tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "data" / "jobs.db"
    settings = make_settings(tmp_path, database_url=f"sqlite:///{path}")

    result = procs.run(command, settings)

    assert_one_line(result, "no store at", "outbox-bridge db init")
    assert not path.exists(), "only `db init` creates a store"
    assert not path.parent.exists()


def test_db_init_where_no_file_can_be_made_names_the_path_and_the_setting(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    settings = make_settings(tmp_path, database_url=f"sqlite:///{blocker / 'jobs.db'}")

    result = procs.run(["db", "init"], settings)

    assert_one_line(result, "cannot create the store", str(blocker), "DATABASE_URL")


@pytest.mark.parametrize("command", [*OPERATOR_COMMANDS, ["db", "init"]], ids=" ".join)
def test_command_on_an_unreachable_postgresql_says_so_in_one_line(tmp_path: Path, command: list[str]) -> None:
    closed_port = procs.free_port()  # nothing listens there: what a stopped server looks like
    url = f"postgresql+psycopg://postgres:s3cret@127.0.0.1:{closed_port}/outbox"
    settings = make_settings(tmp_path, database_url=url)

    result = procs.run(command, settings)

    said = assert_one_line(result, "cannot reach the store", f"127.0.0.1:{closed_port}", "DATABASE_URL")
    assert "s3cret" not in said, "the password is not printed"


def test_a_setting_that_does_not_parse_is_named_in_one_line(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)

    result = procs.run(["status"], settings, LEASE_SECONDS="soon")

    assert_one_line(result, "LEASE_SECONDS is not valid")


@pytest.mark.parametrize(
    "url",
    ["mysql://outbox:s3cret@127.0.0.1/outbox", "postgresql+psycopg2://outbox:s3cret@db/outbox", "jobs.db"],
    ids=["another-database", "another-driver", "no-scheme"],
)
def test_a_database_url_of_no_store_it_runs_on_names_the_schemes_it_takes_in_one_line(
    tmp_path: Path, url: str
) -> None:
    result = procs.run(["status"], make_settings(tmp_path), DATABASE_URL=url)

    said = assert_one_line(
        result, "DATABASE_URL is not valid", "sqlite:///", "postgresql://", "postgresql+psycopg://"
    )
    assert "s3cret" not in said, "the password is not printed"


def test_a_postgres_url_as_providers_write_it_is_taken_as_postgresql(tmp_path: Path) -> None:
    closed_port = procs.free_port()
    url = f"postgres://postgres:s3cret@127.0.0.1:{closed_port}/outbox"

    result = procs.run(["status"], make_settings(tmp_path), DATABASE_URL=url)

    said = assert_one_line(result, "cannot reach the store at postgresql://postgres:***@127.0.0.1")
    assert "s3cret" not in said

"""The command line run in the test's own process, as `typer` runs it: a process per command would cost a
second or more each. What a run printed and its exit code, and the checks the command-line tests share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import Engine, Table, select
from typer.testing import CliRunner

from outbox_bridge.cli import app
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.launch.stack import settings_env


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def runner(settings: Settings, monkeypatch: pytest.MonkeyPatch, user: str) -> CliRunner:
    """A runner with `settings` in the environment, as the OS user `user`."""
    for name, value in settings_env(settings, LOGNAME=user, USER=user).items():
        monkeypatch.setenv(name, value)
    return CliRunner()


def invoke(cli: CliRunner, *args: str) -> Ran:
    result = cli.invoke(app, list(args))
    return Ran(result.exit_code, result.stdout, result.stderr)


def done(result: Ran) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def refused(result: Ran) -> str:
    """The one line a refusal printed (exit 1, no traceback)."""
    said = (result.stdout + result.stderr).strip()
    assert result.returncode == 1, said
    assert len(said.splitlines()) == 1 and "Traceback" not in said, said
    assert said.startswith("outbox-bridge: "), said
    return said


def rows(engine: Engine, table: Table) -> list[dict[str, Any]]:
    return db.read(engine, lambda conn: [dict(r) for r in conn.execute(select(table)).mappings()])

"""The installed version, as the package and the command line say it."""

from __future__ import annotations

from importlib import metadata

from typer.testing import CliRunner

import outbox_bridge
from outbox_bridge.cli import app


def test_the_package_says_the_version_pip_installed() -> None:
    assert outbox_bridge.__version__ == metadata.version("outbox-bridge")
    assert outbox_bridge.__version__[0].isdigit()


def test_version_prints_it_and_does_nothing_else() -> None:
    said = CliRunner().invoke(app, ["--version"])
    assert said.exit_code == 0, said.output
    assert said.stdout == f"outbox-bridge {metadata.version('outbox-bridge')}\n"

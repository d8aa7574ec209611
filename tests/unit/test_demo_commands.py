"""The commands the demo's summary prints run as printed: by name when the PATH finds this installation's
`outbox-bridge`, else by its path (`.venv/bin/outbox-bridge` from the project's directory)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from outbox_bridge.demo import command_name

BIN = Path(sys.executable).parent


def test_by_its_path_when_the_path_does_not_find_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nowhere")
    monkeypatch.chdir(BIN.parent.parent)
    shown = command_name()
    assert shown in {str(BIN.relative_to(BIN.parent.parent) / "outbox-bridge"), str(BIN / "outbox-bridge")}
    assert (Path.cwd() / command_name()).exists()


def test_by_its_name_when_the_path_finds_this_installation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    assert command_name() == "outbox-bridge"

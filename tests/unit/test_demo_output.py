"""The demo's live table, written where its output is not a terminal (a pipe, a file, a CI log): once, ended
by a newline, so what the demo prints next starts a line of its own."""

from __future__ import annotations

import io

import pytest
from rich.console import Console, Group

from outbox_bridge import demo


def test_the_table_ends_its_line_when_the_output_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    written = io.StringIO()
    monkeypatch.setattr(demo, "console", Console(file=written, width=80, force_terminal=False))
    with demo._live() as (live, progress, task):
        progress.update(task, completed=1, total=2)
        live.update(Group(progress, demo._state_table({"a": {"state": "queued"}, "b": {"state": "running"}})))
    demo.console.print("Stopping the stack...")

    lines = written.getvalue().splitlines()
    assert lines[-1] == "Stopping the stack..."
    assert lines[-2].rstrip().endswith("┘"), lines[-2:]
    assert sum("jobs by state" in line for line in lines) == 1, "written once"

"""The commands README.md and docs/ show run as written: every `outbox-bridge ...` names a real command with
real options, and a page whose code blocks call it as bare `outbox-bridge` first says how to put it on the
PATH (`. .venv/bin/activate`, or a virtual environment of the reader's own)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main

from outbox_bridge.bench.options import parser as bench_parser
from outbox_bridge.cli import app

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "reference").glob("*.md")]
)
FENCE = re.compile(r"^\s*```")
# `outbox-bridge` as a command: at the start, after a space, `$(` or a directory, and followed by a space or
# the end (in `sudo -u outbox-bridge` and `logger -t outbox-bridge` it names a user and a tag).
CALL = re.compile(r"(?:^|(?<=[\s(/]))(?<!-u )(?<!-t )outbox-bridge(?=\s|$)")
BARE_CALL = re.compile(r"^\s*(?:[A-Z_]+=\S+\s+)*outbox-bridge\s|\$\(outbox-bridge\s")
SHELL_END = re.compile(r"\s#|\||;|&&|\)|>|`")
INLINE = re.compile(r"`(outbox-bridge [^`]+)`")


def code_blocks(text: str) -> Iterator[tuple[int, list[str]]]:
    """(offset of the block's first line in `text`, its lines with `\\` continuations joined)."""
    inside, lines, start, offset = False, [], 0, 0
    for line in text.splitlines(keepends=True):
        if FENCE.match(line):
            if inside:
                yield start, "".join(lines).replace("\\\n", " ").splitlines()
            inside, lines, start = not inside, [], offset
        elif inside:
            lines.append(line)
        offset += len(line)


def invocations(page: Path) -> Iterator[tuple[str, list[str]]]:
    """Every `outbox-bridge` call on `page`, as (the text it was found in, its words after the name)."""
    text = page.read_text()
    for _, block in code_blocks(text):
        for line in block:
            code = line.split(" #")[0] if not line.lstrip().startswith("#") else ""
            for match in CALL.finditer(code):
                yield line.strip(), SHELL_END.split(code[match.end() :])[0].split()
    for match in INLINE.finditer(text):
        yield match.group(1), SHELL_END.split(match.group(1)[len("outbox-bridge") :])[0].split()


def cleaned(words: list[str]) -> list[str]:
    """Words without the brackets and quotes of a usage line (`[--json]`, `"..."`)."""
    return [w.strip("[]'\"") for w in words if w.strip("[]'\"") and w != "..."]


def check(words: list[str]) -> str | None:
    """What is wrong with `outbox-bridge <words>`, or None."""
    command: Any = typer.main.get_command(app)
    path = ["outbox-bridge"]
    words = cleaned(words)
    while hasattr(command, "commands") and words and not words[0].startswith("-"):
        if words[0] not in command.commands:
            return f"{' '.join(path)} has no command {words[0]!r}"
        command = command.commands[words[0]]
        path.append(words.pop(0))
    if hasattr(command, "commands"):
        return None  # the group's name alone, as prose names it
    if command.name == "bench":
        known = {o for action in bench_parser()._actions for o in action.option_strings}
    else:
        known = {o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")}
        known.add("--help")
        if words and not any(p.param_type_name == "argument" for p in command.params):
            extra = [w for w in words if not w.startswith("-")]
            if extra and not words[0].startswith("-"):
                return f"{' '.join(path)} takes no argument, given {extra[0]!r}"
    for word in words:
        option = word.split("=")[0]
        if option.startswith("--") and option not in known:
            return f"{' '.join(path)} has no option {option}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_on_the_page_exists(page: Path) -> None:
    wrong = [f"{where}: {problem}" for where, words in invocations(page) if (problem := check(words))]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_bare_command_follows_a_line_that_says_where_it_is(page: Path) -> None:
    text = page.read_text()
    for start, block in code_blocks(text):
        if any(BARE_CALL.search(line.split(" #")[0]) for line in block):
            assert "bin/activate" in text[:start], (
                f"{page.relative_to(ROOT)}: a code block runs `outbox-bridge` before the page says to "
                "activate the virtual environment; say so first, or write `.venv/bin/outbox-bridge`"
            )
            return


def test_the_checker_refuses_what_does_not_exist() -> None:
    assert check(["kinds", "purge", "export"]) is not None
    assert check(["schedules", "add", "--every-day", "1"]) is not None
    assert check(["jobs", "list", "--colour"]) is not None
    assert check(["webhooks", "purge"]) is not None
    assert check(["jobs", "requeue", "--state", "dead", "--dry-run"]) is None
    assert check(["bench", "--mode", "both", "--scenario", "delayed"]) is None

"""A driver's statements, read from the `.sql` files in its folder and sent as written.

Each statement is a named block, as sqlc and procrastinate write them:

    -- name: claim_by_ids
    -- :prepared
    -- What the statement does, for a reader.
    UPDATE jobs SET ... WHERE id = ANY(%(ids)s) RETURNING ...;

The block runs from its `-- name:` line to the next one. Its comment lines are the reader's; they are not
sent. `-- :prepared` marks a statement PostgreSQL parses and plans once per connection (only for one whose
best plan does not depend on its values: `docs/scaling.md`). Parameters are written in the style of the
database's own Python driver, so the text is what the database receives: `%(name)s` for psycopg, `:name` for
sqlite3. A list of values is one parameter: an array on PostgreSQL (`= ANY(%(ids)s)`), a JSON array on SQLite
(`IN (SELECT value FROM json_each(:ids))`), as `Driver.array` makes it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$")
_PREPARED = re.compile(r"^--\s*:prepared\s*$")
_COMMENT = re.compile(r"^\s*--")


class BadStatementFile(ValueError):
    """A driver's `.sql` file that cannot be read as named statements."""


@dataclass(frozen=True)
class Statement:
    """One named statement: its text as the database's driver receives it (`Driver.run` sends it)."""

    name: str
    sql: str
    prepared: bool = False


def parse(text: str, source: str) -> dict[str, Statement]:
    """The named statements of one file's `text`; `source` names the file in errors."""
    statements: dict[str, Statement] = {}
    name: str | None = None
    prepared = False
    lines: list[str] = []

    def close() -> None:
        if name is None:
            if any(line.strip() for line in lines):
                raise BadStatementFile(f"{source}: text before the first '-- name:' line")
            return
        sql = "\n".join(lines).strip().rstrip(";").strip()
        if not sql:
            raise BadStatementFile(f"{source}: statement {name!r} is empty")
        if name in statements:
            raise BadStatementFile(f"{source}: statement {name!r} is named twice")
        statements[name] = Statement(name, sql, prepared)

    for line in text.splitlines():
        named = _NAME.match(line)
        if named:
            close()
            name, prepared, lines = named.group(1), False, []
        elif _PREPARED.match(line):
            prepared = True
        elif not _COMMENT.match(line):
            lines.append(line)
    close()
    return statements


def load(folder: Path, files: tuple[str, ...]) -> dict[str, Statement]:
    """Every named statement of `files` in `folder`; a name is used once across them."""
    statements: dict[str, Statement] = {}
    for file in files:
        for name, statement in parse((folder / file).read_text(), file).items():
            if name in statements:
                raise BadStatementFile(f"{file}: statement {name!r} is also named in another file")
            statements[name] = statement
    return statements

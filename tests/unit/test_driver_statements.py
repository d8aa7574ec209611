"""Each driver's statements are hand-written named blocks in the `.sql` files of its folder
(`jobstore/drivers/sqlfile.py`): every file a driver names is there and reads, and both drivers write the same
statements, by the same names, so that a store module runs one name on either database."""

from __future__ import annotations

import re

import pytest

from outbox_bridge.jobstore import drivers
from outbox_bridge.jobstore.drivers.sqlfile import BadStatementFile, parse

# The parameter style of each database's Python driver, which its `.sql` files are written in.
PARAMETER = {"sqlite": re.compile(r"(?<![:\w]):[a-z_]\w*"), "postgresql": re.compile(r"%\(\w+\)s")}
OTHER_STYLE = {"sqlite": re.compile(r"%\(\w+\)s"), "postgresql": re.compile(r"(?<![:\w]):[a-z_]\w*\b")}


@pytest.mark.parametrize("name", drivers.DRIVERS)
def test_every_file_a_driver_names_reads_as_named_statements(name: str) -> None:
    driver = drivers.named(name)
    assert sorted(path.name for path in driver.folder.glob("*.sql")) == sorted(driver.sql_files)
    for statement in driver.statements.values():
        assert statement.sql and not statement.sql.endswith(";"), statement.name
        assert not OTHER_STYLE[name].search(statement.sql), (name, statement.name)


def test_both_drivers_write_the_same_statements_but_their_own() -> None:
    """A statement the store's modules run by name is in both drivers' files; one a driver sends from its
    own methods alone is declared as its own, and is not written out in the other's."""
    sqlite_driver, postgresql_driver = (drivers.named(name) for name in drivers.DRIVERS)
    assert sqlite_driver.own_statements <= set(sqlite_driver.statements)
    assert postgresql_driver.own_statements <= set(postgresql_driver.statements)
    sqlite = set(sqlite_driver.statements) - sqlite_driver.own_statements
    postgresql = set(postgresql_driver.statements) - postgresql_driver.own_statements
    assert sqlite == postgresql, {
        "only on SQLite": sqlite - postgresql,
        "only on PostgreSQL": postgresql - sqlite,
    }


def test_a_file_is_read_block_by_block() -> None:
    statements = parse(
        "-- a header\n\n-- name: one\n-- :prepared\n-- what it does\nSELECT 1;\n\n"
        "-- name: two\nSELECT\n  2\n",
        "x.sql",
    )
    assert [(s.name, s.sql, s.prepared) for s in statements.values()] == [
        ("one", "SELECT 1", True),
        ("two", "SELECT\n  2", False),
    ]


@pytest.mark.parametrize(
    "text",
    ["SELECT 1\n", "-- name: one\n\n", "-- name: one\nSELECT 1\n-- name: one\nSELECT 2\n"],
    ids=["text before a name", "empty", "named twice"],
)
def test_a_file_that_cannot_be_read_is_refused(text: str) -> None:
    with pytest.raises(BadStatementFile):
        parse(text, "x.sql")

"""Every statement a store engine's connections send is seen once, before it is sent, by the store's own
observer (`db.watch_statements`, `db.statements_seen`), whichever way it was sent: through SQLAlchemy
(`conn.execute`) or below it, on the database driver's connection (`Driver.run`, `Driver.run_many`, SQLite's
BEGIN). The statement count and `transact_one`'s one-statement guard see them the same way, and SQLAlchemy's
own events fire only for what SQLAlchemy ran."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Connection, Engine, event, text

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, drivers
from outbox_bridge.jobstore.drivers.sqlfile import Statement

THROUGH_SQLALCHEMY = "SELECT 1"
# The same statements in each database driver's parameter style.
PARAMETER = {"sqlite": ":b_id", "postgresql": "%(b_id)s"}


def below(conn: Connection, params: dict[str, str]) -> list[Any]:
    sql = f"SELECT id FROM jobs WHERE id = {PARAMETER[conn.dialect.name]}"
    return drivers.of(conn).send(conn, Statement("below", sql), params)


def many_below(conn: Connection, rows: list[dict[str, str]]) -> int:
    sql = f"UPDATE jobs SET kind = 'renamed' WHERE id = {PARAMETER[conn.dialect.name]}"
    return drivers.of(conn).send_many(conn, Statement("many_below", sql), rows)


def both_ways(conn: Connection) -> None:
    conn.execute(text(THROUGH_SQLALCHEMY))
    below(conn, {"b_id": "nobody"})
    many_below(conn, [{"b_id": "nobody"}, {"b_id": "nobody-else"}])


def test_a_statement_sent_either_way_is_seen_and_counted_once(engine: Engine) -> None:
    before = db.stats.snapshot()["statements"]
    with db.statements_seen(engine) as seen:
        db.transact(engine, both_ways)
    counted = db.stats.snapshot()["statements"] - before
    if engine.dialect.name == "sqlite":  # its BEGIN IMMEDIATE is sent below SQLAlchemy too
        begin, *seen = seen
        assert begin == db.Sent("BEGIN IMMEDIATE", (), False)
    assert counted == len(seen) + (engine.dialect.name == "sqlite")
    through, below, many = seen
    assert through.sql == THROUGH_SQLALCHEMY and not through.many
    assert "FROM jobs" in below.sql and not below.many
    assert below.parameters == {"b_id": "nobody"}
    assert many.sql.startswith("UPDATE jobs") and many.many
    assert [p["b_id"] for p in many.parameters] == ["nobody", "nobody-else"]


def test_sqlalchemys_own_events_see_only_what_sqlalchemy_ran(engine: Engine) -> None:
    ran: list[str] = []

    def note(conn: Any, cursor: Any, statement: str, *_args: Any) -> None:
        ran.append(statement)

    event.listen(engine, "before_cursor_execute", note)
    try:
        db.transact(engine, both_ways)
    finally:
        event.remove(engine, "before_cursor_execute", note)
    assert ran == [THROUGH_SQLALCHEMY]


def test_a_watcher_sees_statements_until_it_stops_and_only_on_its_engine(
    engine: Engine, settings: Settings
) -> None:
    watched: list[str] = []
    stop = db.watch_statements(engine, lambda conn, sent: watched.append(sent.sql))
    other = db.make_engine(settings)
    try:
        db.read(other, lambda conn: conn.execute(text(THROUGH_SQLALCHEMY)))
        assert watched == []
        db.read(engine, lambda conn: below(conn, {"b_id": "nobody"}))
        assert len(watched) == 1 + (engine.dialect.name == "sqlite")  # (and its BEGIN DEFERRED)
    finally:
        stop()
        other.dispose()
    db.read(engine, lambda conn: below(conn, {"b_id": "nobody"}))
    assert len(watched) == 1 + (engine.dialect.name == "sqlite"), "seen after the watcher stopped"


@pytest.mark.databases("postgresql")
def test_transact_one_refuses_a_second_statement_sent_below_sqlalchemy_before_it_is_sent(
    engine: Engine,
) -> None:
    with db.statements_seen(engine) as seen, pytest.raises(db.SecondStatement):
        db.transact_one(engine, both_ways)
    assert [s.sql for s in seen] == [THROUGH_SQLALCHEMY], "the second statement was sent"

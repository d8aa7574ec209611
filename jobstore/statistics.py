"""Fresh planner statistics, and few dead index entries, for PostgreSQL's hot tables.

PostgreSQL plans each statement with the row counts its last ANALYZE of the table saw, and autovacuum
analyzes a table only once a tenth of it changed, looking at most once a minute (`autovacuum_naptime`).
A queue's tables change faster than that: after a burst into a table last counted with few queued jobs,
the claim's due walk reads and sorts every queued job, the claim's `UPDATE ... WHERE id IN (...)` walks
the state indexes instead of the primary key, and dropping a claimed job's pending outbox row reads every
pending row, so each claim costs in proportion to the backlog until the next ANALYZE (measured in
`docs/scaling.md`). The sweepers (the relay's housekeeping, a baseline worker's sweep loop) call `tend`
every sweep, so a table is analyzed within about a sweep interval of changing that much, and at most once
every `MIN_INTERVAL_SECONDS` (whoever ran the last ANALYZE: PostgreSQL keeps its time): a burst's first
few hundred rows bring fresh counts, and the ANALYZEs after them, each a cost to the server, do not run
every sweep while it lasts (`docs/scaling.md` has the figures).

Every move of a job, every attempt ended and every outbox row marked published leaves a dead row version
(`TABLES`), and its entries stay in the indexes until a VACUUM of the table removes them. The walks of one
state's index (the relay's read of the unpublished rows, the claim's of the queued jobs, the sweep's of the
running ones) step over every dead entry at their start, so each read costs in proportion to the rows moved
since the table's last VACUUM, and autovacuum waits for a fifth of the table to be dead: a day of published
rows kept at 200 jobs a second is hours of them (`docs/scaling.md` has the figures); the attempts, read by
job, grow by one dead version a job and are kept as lean. So `tend` also vacuums a table once
`MIN_DEAD` of its row versions are dead, at most every `VACUUM_MIN_INTERVAL_SECONDS` (whoever vacuumed it
last).

Only a table's owner, the database's owner (or, from PostgreSQL 17, a user granted MAINTAIN) may VACUUM or
ANALYZE it; a store user that may not is told once per process, and the tables are left to autovacuum
(`docs/operations.md`).

SQLite keeps no such counts unless asked to, and plans these statements by their indexes alone; it drops
a row's index entries when the row changes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from outbox_bridge.jobstore import drivers

log = logging.getLogger(__name__)

# Every table a job's moves leave dead row versions in: a job's claim and its end each rewrite its row, its
# outbox row is marked published, and each attempt is written as it starts and again as it ends.
TABLES = ("attempts", "jobs", "outbox")
# A table is analyzed again once this many of its rows changed since its last ANALYZE, and at least
# CHANGED_FRACTION of them (autovacuum's defaults are 50 rows and a tenth, checked once a minute).
MIN_CHANGED = 500
CHANGED_FRACTION = 0.1
MIN_INTERVAL_SECONDS = 10.0
# An ANALYZE waits at most this long for its table lock (a VACUUM of the table holds it): the sweeper that
# runs it has leases to settle, and the next sweep tries again.
LOCK_TIMEOUT = "200ms"
# A table is vacuumed once this many of its row versions are dead (a job's two moves and its outbox row's
# mark leave three), and at most every VACUUM_MIN_INTERVAL_SECONDS.
MIN_DEAD = 10_000
VACUUM_MIN_INTERVAL_SECONDS = 30.0


@dataclass(frozen=True)
class Due:
    """The store tables whose planner statistics went stale (`stale`), those worn (`worn`), and those the
    store's user may neither VACUUM nor ANALYZE (`refused`: never stale or worn here)."""

    stale: list[str]
    worn: list[str]
    refused: list[str]


def due(
    engine: Engine,
    *,
    stale_after: float = MIN_INTERVAL_SECONDS,
    worn_after: float = VACUUM_MIN_INTERVAL_SECONDS,
    min_dead: int = MIN_DEAD,
) -> Due:
    """In one read: the tables whose rows changed enough since their last ANALYZE, at least `stale_after`
    seconds ago, and those with at least `min_dead` dead row versions, last vacuumed at least `worn_after`
    seconds ago (none where the database keeps no such statistics, or leaves no dead versions); and those
    the store's user may do neither for."""
    params = {
        "tables": list(TABLES),
        "min_changed": MIN_CHANGED,
        "fraction": CHANGED_FRACTION,
        "stale_after": stale_after,
        "min_dead": min_dead,
        "worn_after": worn_after,
    }
    return Due(*drivers.of(engine).upkeep_due(engine, params))


def tend(engine: Engine) -> None:
    """What a sweeper does every sweep: VACUUM the worn tables, then ANALYZE the stale ones (one read
    decides both). A store that fails leaves them for the next call."""
    found = _read(engine)
    _tell_refused(found.refused)
    _vacuum_each(engine, found.worn)
    _analyze_each(engine, found.stale)


def stale(engine: Engine, min_interval: float = MIN_INTERVAL_SECONDS) -> list[str]:
    """The store tables whose planner statistics went stale (`due`)."""
    return due(engine, stale_after=min_interval).stale


def worn(
    engine: Engine, min_interval: float = VACUUM_MIN_INTERVAL_SECONDS, min_dead: int = MIN_DEAD
) -> list[str]:
    """The store tables worn enough to be vacuumed (`due`)."""
    return due(engine, worn_after=min_interval, min_dead=min_dead).worn


def refresh(engine: Engine, min_interval: float = MIN_INTERVAL_SECONDS) -> list[str]:
    """ANALYZE each stale table (`stale`); returns those analyzed. A table whose lock is not to be had
    within `LOCK_TIMEOUT`, or a store that fails, is left for the next call."""
    return _analyze_each(engine, _read(engine, stale_after=min_interval).stale)


def vacuum(
    engine: Engine, min_interval: float = VACUUM_MIN_INTERVAL_SECONDS, min_dead: int = MIN_DEAD
) -> list[str]:
    """VACUUM each worn table (`worn`); returns those asked for. One that another VACUUM or an ANALYZE
    holds, or a store that fails, is left for the next call."""
    return _vacuum_each(engine, _read(engine, worn_after=min_interval, min_dead=min_dead).worn)


def _read(engine: Engine, **limits: Any) -> Due:
    """`due`, or no table at all when the store cannot be read (the next sweep reads again)."""
    try:
        return due(engine, **limits)
    except SQLAlchemyError as exc:
        log.debug("could not read the tables' statistics: %s", exc)
        return Due([], [], [])


_told: set[str] = set()  # the tables a warning already named, in this process


def _tell_refused(tables: list[str]) -> None:
    """Warn, once per process and table, that the store's user may not keep `tables` up."""
    new = [table for table in tables if table not in _told]
    if not new:
        return
    _told.update(new)
    log.warning(
        "the store's user may not VACUUM or ANALYZE %s (only their owner or the database's owner may): "
        "they are left to autovacuum, and reads of them slow down as their dead rows pile up "
        "(docs/operations.md, 'The store's user may not vacuum')",
        ", ".join(new),
    )


def _analyze_each(engine: Engine, tables: list[str]) -> list[str]:
    def analyze(table: str) -> None:
        with engine.begin() as conn:
            drivers.of(conn).analyze(conn, table, lock_timeout=LOCK_TIMEOUT)

    return _each(tables, "ANALYZE", analyze, "analyzed %s: their planner statistics were stale")


def _vacuum_each(engine: Engine, tables: list[str]) -> list[str]:
    def vacuum(table: str) -> None:
        drivers.of(engine).vacuum(engine, table)

    return _each(tables, "VACUUM", vacuum, "vacuumed %s: their dead row versions piled up")


def _each(tables: list[str], command: str, run: Callable[[str], None], done: str) -> list[str]:
    """`run(table)` for each of `tables`; those it ran for. One the store fails is left for the next sweep."""
    ran = []
    for table in tables:
        try:
            run(table)
        except SQLAlchemyError as exc:
            log.debug("%s %s postponed: %s", command, table, exc)
            continue
        ran.append(table)
    if ran:
        log.debug(done, ", ".join(ran))
    return ran

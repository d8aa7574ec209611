"""Fresh planner statistics for PostgreSQL's hot tables.

PostgreSQL plans each statement with the row counts its last ANALYZE of the table saw, and autovacuum
analyzes a table only once a tenth of it changed, looking at most once a minute (`autovacuum_naptime`).
A queue's tables change faster than that: after a burst into a table last counted with few queued jobs,
the claim's due walk reads and sorts every queued job, the claim's `UPDATE ... WHERE id IN (...)` walks
the state indexes instead of the primary key, and dropping a claimed job's pending outbox row reads every
pending row, so each claim costs in proportion to the backlog until the next ANALYZE (measured in
`docs/scaling.md`). The sweepers (the relay's housekeeping, a baseline worker's sweep loop) call `refresh`
every sweep, so a table is analyzed within about a sweep interval of changing that much, and at most once
every `MIN_INTERVAL_SECONDS` (whoever ran the last ANALYZE: PostgreSQL keeps its time): a burst's first
few hundred rows bring fresh counts, and the ANALYZEs after them, each a cost to the server, do not run
every sweep while it lasts (`docs/scaling.md` has the figures).

SQLite keeps no such counts unless asked to, and plans these statements by their indexes alone."""

from __future__ import annotations

import logging

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from outbox_bridge.jobstore import drivers

log = logging.getLogger(__name__)

TABLES = ("jobs", "outbox")
# A table is analyzed again once this many of its rows changed since its last ANALYZE, and at least
# CHANGED_FRACTION of them (autovacuum's defaults are 50 rows and a tenth, checked once a minute).
MIN_CHANGED = 500
CHANGED_FRACTION = 0.1
MIN_INTERVAL_SECONDS = 10.0
# An ANALYZE waits at most this long for its table lock (a VACUUM of the table holds it): the sweeper that
# runs it has leases to settle, and the next sweep tries again.
LOCK_TIMEOUT = "200ms"


def stale(engine: Engine, min_interval: float = MIN_INTERVAL_SECONDS) -> list[str]:
    """The store tables whose rows changed enough since their last ANALYZE, which was at least
    `min_interval` seconds ago (none where the database keeps no such statistics)."""
    params = {
        "tables": list(TABLES),
        "min_changed": MIN_CHANGED,
        "fraction": CHANGED_FRACTION,
        "min_interval": min_interval,
    }
    return drivers.of(engine).stale_tables(engine, params)


def refresh(engine: Engine, min_interval: float = MIN_INTERVAL_SECONDS) -> list[str]:
    """ANALYZE each stale table (`stale`); returns those analyzed. A table whose lock is not to be had
    within `LOCK_TIMEOUT`, or a store that fails, is left for the next call."""
    analyzed = []
    try:
        tables = stale(engine, min_interval)
    except SQLAlchemyError as exc:
        log.debug("could not read the planner statistics' age: %s", exc)
        return []
    for table in tables:
        try:
            with engine.begin() as conn:
                drivers.of(conn).analyze(conn, table, lock_timeout=LOCK_TIMEOUT)
        except SQLAlchemyError as exc:
            log.debug("ANALYZE %s postponed: %s", table, exc)
            continue
        analyzed.append(table)
    if analyzed:
        log.debug("analyzed %s: their planner statistics were stale", ", ".join(analyzed))
    return analyzed

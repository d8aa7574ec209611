"""The PostgreSQL driver: a store on a server, READ COMMITTED, written by many transactions at once.

A statement can write several tables (data-modifying CTEs), so a round trip carries what SQLite takes a few
statements for: an accept writes the jobs and their outbox rows in one, a claim the jobs and their first
attempt rows, a completion the jobs and the attempts they end. Rows arrive as one array per column
(`unnest`). The statements of the path every job takes are prepared on the server, once per connection; a
statement whose best plan depends on its values (the relay's read behind a backlog) is planned at every run.
Claimers lock the rows they take and skip those another holds; the tenant cap and flow limits take advisory
locks. Committed outbox rows are announced by the store's own trigger (`NOTIFY`), to listening relays
(`drivers.postgresql.listener`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import psycopg
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, DisconnectionError, IntegrityError

from outbox_bridge.jobstore import events
from outbox_bridge.jobstore.drivers import Completion, Driver, Notifications, Notifier, Window
from outbox_bridge.jobstore.drivers.postgresql.listener import Listener
from outbox_bridge.jobstore.errors import Retry
from outbox_bridge.jobstore.records import dumps
from outbox_bridge.jobstore.schema import JOB_COLUMNS

if TYPE_CHECKING:
    from outbox_bridge.core.settings import Settings


# A pooled connection back from the pool after this long idle is pinged before it is used.
PING_AFTER_IDLE_SECONDS = 1.0
_IDLE_SINCE = "idle_since"

# --- the statements ---------------------------------------------------------------------------------------


class PostgreSQLDriver(Driver):
    name: ClassVar[str] = "postgresql"
    folder: ClassVar[Path] = Path(__file__).parent
    # The accept of a batch with uniqueness windows (SQLite writes it one job at a time), advisory locks,
    # the claim's reads that lock their rows (`locking`), and the upkeep of the tables
    # (SQLite's planner keeps no statistics the store relies on, and it leaves no dead row versions behind).
    own_statements: ClassVar[frozenset[str]] = frozenset(
        {
            "advisory_lock",
            "jobs_insert_unique",
            "upkeep_due",
            "upkeep_lock_timeout",
            "vacuum_attempts",
            "vacuum_jobs",
            "vacuum_outbox",
            "expired_leases_due_locking",
            "queued_due_locking",
        }
    )
    read_options: ClassVar[Mapping[str, Any]] = {}

    def commits_statement_alone(self) -> bool:
        return True

    def calls_may_wait_on_network(self) -> bool:
        return True

    def announces_commits(self) -> bool:
        return True

    def reads_due_in_one_statement(self) -> bool:
        return True

    def array(self, values: Sequence[Any]) -> Any:
        return list(values)  # psycopg sends a list as an array

    def locking(self, name: str) -> str:
        return f"{name}_locking"

    def make_engine(
        self, url: URL, settings: Settings, options: dict[str, Any], *, role: str | None, **kwargs: Any
    ) -> Engine:
        if "application_name" not in url.query:
            kwargs["connect_args"] = {
                "application_name": connection_name(role),
                **kwargs.get("connect_args", {}),
            }
        engine = create_engine(url, isolation_level="READ COMMITTED", execution_options=options, **kwargs)
        _ping_when_idle(engine)
        return engine

    def file(self, url: URL) -> Path | None:
        return None

    def execute(
        self, driver_connection: Any, sql: str, values: Any, *, prepared: bool
    ) -> list[tuple[Any, ...]]:
        cursor = driver_connection.execute(sql, values, prepare=prepared)
        return cursor.fetchall() if cursor.description is not None else []

    @contextmanager
    def raised(self, conn: Connection, sql: str, values: Any) -> Iterator[None]:
        try:
            yield
        except psycopg.Error as exc:
            driver = conn.connection.driver_connection
            lost = conn.dialect.is_disconnect(exc, driver, None)  # type: ignore[arg-type]
            if lost:
                conn.invalidate(exc)
            raise DBAPIError.instance(
                sql, values, exc, psycopg.Error, connection_invalidated=lost, dialect=conn.dialect
            ) from exc

    def check(self, conn: Connection) -> str | None:
        return None

    def listen(self, settings: Settings, role: str) -> Notifications | None:
        return Listener.open(settings.database_url, role=role, application_name=connection_name(role))

    def notifier(self, engine: Engine) -> Notifier | None:
        return None  # the store's trigger tells the listeners

    def lock_keys(self, conn: Connection, keys: Iterable[tuple[int, int]]) -> None:
        pairs = list(keys)
        if pairs:  # one statement takes them all, in this order
            params = {"spaces": [space for space, _ in pairs], "keys": [key for _, key in pairs]}
            self.run(conn, "advisory_lock", params)

    def insert_jobs(
        self,
        conn: Connection,
        rows: Sequence[Mapping[str, Any]],
        windows: Mapping[str, Window] | None = None,
    ) -> set[str]:
        """The jobs and their outbox rows in one statement, one array per column; a batch with windows
        takes them in the same statement (`jobs_insert_unique`), so it commits by itself all the same. An
        accept of a key another uncommitted transaction is inserting waits for it, then skips the key if it
        committed (the caller reads the winner's row) or inserts it if it rolled back; so does one of a
        window another is taking."""
        if not rows:
            return set()
        params: dict[str, Any] = {name: [row[name] for row in rows] for name in JOB_COLUMNS}
        statement = "jobs_insert"
        if windows:
            statement = "jobs_insert_unique"
            taken = [windows.get(row["id"]) for row in rows]
            params["unique_key"] = [None if w is None else w.key for w in taken]
            params["unique_until"] = [None if w is None else w.until for w in taken]
            params["now"] = max(row["created_at"] for row in rows)
        try:
            created = {str(row[0]) for row in self.run(conn, statement, params)}
        except IntegrityError as exc:  # read the winner's row on the rerun
            raise Retry("idempotency key raced") from exc
        if created:
            due = min(row["available_at"] for row in rows if row["id"] in created)
            events.note_outbox_row(conn, due)
        return created

    def claim(
        self,
        conn: Connection,
        params: Mapping[str, Any],
        attempt_ids: Mapping[str, str],
        *,
        limited: Sequence[str] | None,
        drop_pending: bool,
        queues: Collection[str] | None = None,
    ) -> tuple[list[tuple[Any, ...]], set[str]]:
        """The jobs, their first attempt rows and (with `drop_pending`) the dropping of their pending
        outbox rows, in one statement."""
        values = {
            **params,
            "ids": list(attempt_ids),
            "attempt_ids": list(attempt_ids.values()),
            "limited": limited is not None,
            "limited_kinds": list(limited or ()),
            "drop_pending": drop_pending,
            **self.queues(queues),
        }
        rows = self.run(conn, "claim_by_ids", values)
        return rows, {str(row[0]) for row in rows if row[1] == 1}

    def complete_many(
        self, conn: Connection, completions: Sequence[Completion], now: float
    ) -> list[tuple[Any, ...]]:
        params = {
            "now": now,
            "jobs": [c.job_id for c in completions],
            "epochs": [c.epoch for c in completions],
            "attempts": [c.attempt_id for c in completions],
            "outputs": [None if c.output is None else dumps(c.output) for c in completions],
        }
        return self.run(conn, "complete_many", params)

    def mark_published(self, conn: Connection, params: Mapping[str, Any], ids: Sequence[int]) -> list[Any]:
        return self.run(conn, "outbox_mark_published", {**params, "ids": list(ids)})

    def upkeep_due(self, engine: Engine, params: Mapping[str, Any]) -> tuple[list[str], list[str], list[str]]:
        with engine.connect() as conn:
            rows = self.run(conn, "upkeep_due", params)
        stale = sorted(str(name) for name, is_stale, _, _ in rows if is_stale)
        worn = sorted(str(name) for name, _, is_worn, _ in rows if is_worn)
        refused = sorted(str(name) for name, _, _, maintainable in rows if not maintainable)
        return stale, worn, refused

    def analyze(self, conn: Connection, table: str, *, lock_timeout: str) -> None:
        self.run(conn, "upkeep_lock_timeout", {"lock_timeout": lock_timeout})
        self.run(conn, f"analyze_{table}", {})

    def vacuum(self, engine: Engine, table: str) -> None:
        # VACUUM runs outside a transaction (`upkeep.sql` says how it runs).
        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            self.run(conn, f"vacuum_{table}", {})


def connection_name(role: str | None) -> str:
    """What a process's connections call themselves (`application_name`): `outbox-bridge:relay:4242` for
    a relay of process id 4242, `outbox-bridge:4242` for a process of no role (a tool, a test)."""
    return ":".join(["outbox-bridge", *([role] if role else []), str(os.getpid())])


def _ping_when_idle(engine: Engine) -> None:
    """Check a pooled connection with a round trip only when it comes back to work after
    `PING_AFTER_IDLE_SECONDS` in the pool; a dead one is replaced before the caller sees it. A connection in
    steady use goes unchecked (a ping at every checkout was one round trip in every transaction): if the
    server dropped it meanwhile, `db.transact` runs the transaction again on a new one."""

    @event.listens_for(engine, "checkin")
    def _note_idle(_dbapi_connection: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping_if_idle(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get(_IDLE_SINCE)
        if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_SECONDS:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise DisconnectionError(f"a pooled connection failed its ping: {exc}") from exc


DRIVER = PostgreSQLDriver()

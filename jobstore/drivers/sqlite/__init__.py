"""The SQLite driver: a store in one file, written by one transaction at a time.

Engines open the file in WAL mode with `synchronous=FULL` by default, foreign keys on, and a real `BEGIN
IMMEDIATE` for every write transaction (pysqlite's own BEGIN handling is switched off, per SQLAlchemy's
documented recipe); writers queue (`drivers.sqlite.writer_queue`) and the store retries the lock errors
that remain (`jobstore.db`). A statement writes one table, so an accept, a claim and a completion are each a
few statements in one transaction. Processes on the host hear of new outbox rows through the notify sockets
beside the file (`drivers.sqlite.notify_sockets`), told after the commit. An engine only ever uses the file
its URL names now (`drivers.sqlite.storefile`).

The hot statements name the index SQLite is to use. SQLite chooses a statement's index from the statistics
ANALYZE leaves in `sqlite_stat1`, and a store has none (nothing runs ANALYZE; run on a new store it would
describe empty tables). Without them SQLite takes an equality on an indexed column for more selective than a
list of ids: a claim of 16 jobs by id walked every queued job through a state index, the relay's mark every
unpublished row, and its read sorted every due row, each costing in proportion to the backlog. So the
driver's statements name the index of each (`INDEXED BY`, `NOT INDEXED`, in its `.sql` files);
`tests/integration/test_sqlite_plans.py` checks each plan on a new store.
"""

from __future__ import annotations

import json
import sqlite3
import weakref
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError, IntegrityError

from outbox_bridge.jobstore import events
from outbox_bridge.jobstore.drivers import (
    Completion,
    Driver,
    Notifications,
    Window,
    WriterTurns,
    attempt_ended,
)
from outbox_bridge.jobstore.drivers.sending import sending
from outbox_bridge.jobstore.drivers.sqlite import storefile
from outbox_bridge.jobstore.drivers.sqlite.notify_sockets import Notifier, NotifySocket, directory_for
from outbox_bridge.jobstore.drivers.sqlite.writer_queue import WriterQueue, shared_writer_queue
from outbox_bridge.jobstore.errors import Retry

if TYPE_CHECKING:
    from outbox_bridge.core.settings import Settings


class SQLiteDriver(Driver):
    name: ClassVar[str] = "sqlite"
    folder: ClassVar[Path] = Path(__file__).parent
    # An accept, a claim and a mark take a few statements here where PostgreSQL takes one.
    own_statements: ClassVar[frozenset[str]] = frozenset(
        {
            "jobs_present",
            "outbox_add_accepted",
            "job_uniques_take",
            "job_withdraw",
            "claim_drop_pending",
            "outbox_event_facts",
        }
    )
    # A read takes no write lock: its BEGIN is deferred.
    read_options: ClassVar[Mapping[str, Any]] = {"sqlite_begin": "DEFERRED"}

    def commits_statement_alone(self) -> bool:
        return False

    def calls_may_wait_on_network(self) -> bool:
        return False

    def announces_commits(self) -> bool:
        return False

    def reads_due_in_one_statement(self) -> bool:
        return False

    def array(self, values: Sequence[Any]) -> Any:
        return json.dumps(list(values))  # read by json_each

    def make_engine(
        self, url: URL, settings: Settings, options: dict[str, Any], *, role: str | None, **kwargs: Any
    ) -> Engine:
        engine = create_engine(url, execution_options=options, **kwargs)
        _install_hooks(self, engine, settings.sqlite_synchronous)
        notifier = self.notifier(engine)
        if notifier is not None:
            _notifiers[engine] = notifier
        database = self.file(url)
        if database is not None:
            _writer_queues[engine] = shared_writer_queue(writer_queue_path(database))
            if not url.query.get("uri"):  # a URI names its own file and open mode
                storefile.guard(engine, database)
        return engine

    def file(self, url: URL) -> Path | None:
        if not url.database or url.database == ":memory:":
            return None
        return Path(url.database)

    def execute(
        self, driver_connection: Any, sql: str, values: Any, *, prepared: bool
    ) -> list[tuple[Any, ...]]:
        # sqlite3 keeps every statement it ran prepared in its connection's cache.
        return driver_connection.execute(sql, values).fetchall()

    @contextmanager
    def raised(self, conn: Connection, sql: str, values: Any) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise DBAPIError.instance(sql, values, exc, sqlite3.Error, dialect=conn.dialect) from exc

    def writer_turns(self, engine: Engine) -> WriterTurns | None:
        return _writer_queues.get(engine)

    def still_in_place(self, engine: Engine, conn: Connection) -> bool:
        return storefile.still_named(engine, conn)

    def announce(self, engine: Engine, due: float) -> None:
        notifier = _notifiers.get(engine)
        if notifier is not None:
            notifier.notify(due)

    def check(self, conn: Connection) -> str | None:
        mode = str(conn.exec_driver_sql("PRAGMA journal_mode").scalar())
        if mode.lower() == "wal":
            return None
        return (
            f"the SQLite database is in {mode} journal mode; the store runs in WAL mode "
            "(`outbox-bridge db init` sets it, and every connection the store opens uses it)"
        )

    def listen(self, settings: Settings, role: str) -> Notifications | None:
        database = self.file(make_url(settings.database_url))
        return None if database is None else NotifySocket.open(directory_for(database), role=role)

    def notifier(self, engine: Engine) -> Notifier | None:
        database = self.file(engine.url)
        return None if database is None else Notifier(directory_for(database))

    def lock_keys(self, conn: Connection, keys: Iterable[tuple[int, int]]) -> None:
        return None  # write transactions run one at a time

    def insert_jobs(
        self,
        conn: Connection,
        rows: Sequence[Mapping[str, Any]],
        windows: Mapping[str, Window] | None = None,
    ) -> set[str]:
        """The job rows in one call into sqlite3 (`run_many`). When it counts every row inserted (the
        common case), that is all of them; otherwise one indexed lookup of our ids says which (a key taken
        before, or twice in this batch, skipped its row). A batch with windows is written one job at a
        time instead (`_insert_in_turn`). Then the outbox rows of the new jobs, in one call too, each read
        from its job's row. When a concurrent accept of the same key wins, ours fails on the unique key."""
        if not rows:
            return set()
        try:
            created = self._insert_in_turn(conn, rows, windows) if windows else self._insert_all(conn, rows)
        except IntegrityError as exc:  # read the winner's row on the rerun
            raise Retry("idempotency key raced") from exc
        new = rows if len(created) == len(rows) else [r for r in rows if r["id"] in created]
        if new:
            self.run_many(conn, "outbox_add_accepted", new)
            events.note_outbox_row(conn, min(row["available_at"] for row in new))
        return created

    def _insert_all(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> set[str]:
        inserted = self.run_many(conn, "jobs_insert", rows)
        ids = [row["id"] for row in rows]
        if inserted == len(rows):
            return set(ids)
        return {str(r[0]) for r in self.run(conn, "jobs_present", {"ids": self.array(ids)})}

    def _insert_in_turn(
        self, conn: Connection, rows: Sequence[Mapping[str, Any]], windows: Mapping[str, Window]
    ) -> set[str]:
        """Each job in the batch's order, the first of each tenant + key only, as `jobs_insert_unique`
        writes them on PostgreSQL. A job with a window is inserted first (the foreign key wants it there,
        and the write takes the database's lock whatever began the transaction), then takes its window
        unless another job holds it, and is withdrawn if it does not."""
        now = max(row["created_at"] for row in rows)
        created: set[str] = set()
        keys: set[tuple[str, str]] = set()
        for row in rows:
            key = (row["tenant"], row["operation_key"])
            named_before = key in keys
            keys.add(key)
            if named_before or not self.run_many(conn, "jobs_insert", [row]):
                continue  # its key is named earlier in the batch, or taken
            window = windows.get(row["id"])
            if window is not None and not self.run(conn, "job_uniques_take", _taking(row, window, now)):
                self.run(conn, "job_withdraw", {"id": row["id"]})
                continue
            created.add(row["id"])
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
        """The jobs in one statement, the pending outbox rows of those taken in another (with
        `drop_pending`), then the first attempt rows in one call into the driver."""
        values = {
            **params,
            "ids": self.array(list(attempt_ids)),
            "limited": limited is not None,
            "limited_kinds": self.array(limited or ()),
            **self.queues(queues),
        }
        rows = self.run(conn, "claim_by_ids", values)
        if drop_pending and rows:
            self.run(conn, "claim_drop_pending", {"jobs": self.array([row[0] for row in rows])})
        first = [row for row in rows if row[1] == 1]
        if first:
            started, worker = params["now"], params["worker"]
            self.run_many(
                conn,
                "insert_attempt",
                [
                    {"id": attempt_ids[row[0]], "job_id": row[0], "epoch": 1, "worker": worker,
                     "started_at": started}
                    for row in first
                ],
            )  # fmt: skip
        return rows, {str(row[0]) for row in first}

    def complete_many(
        self, conn: Connection, completions: Sequence[Completion], now: float
    ) -> list[tuple[Any, ...]]:
        """The jobs in one statement (their fences as a JSON array of [job id, epoch]), then the attempts
        they end in one call into the driver."""
        fences = self.array([[c.job_id, c.epoch] for c in completions])
        rows = self.run(conn, "complete_many", {"fences": fences, "now": now})
        states = {str(row[1]): str(row[0]) for row in rows}
        ended = [
            attempt_ended(c.attempt_id, states[c.job_id], now, output=c.output)
            for c in completions
            if c.job_id in states
        ]
        if ended:
            self.run_many(conn, "end_attempt", ended)
        return rows

    def mark_published(self, conn: Connection, params: Mapping[str, Any], ids: Sequence[int]) -> list[Any]:
        """The mark returns the job ids alone, and their events' facts are read after it by job id: a
        correlated subquery in SQLite's RETURNING cannot use an index (3.40 scans `jobs` for every row
        returned)."""
        marked = [
            str(r[0]) for r in self.run(conn, "outbox_mark_published", {**params, "ids": self.array(ids)})
        ]
        if not marked:
            return []
        found = {
            str(r[0]): tuple(r[1:])
            for r in self.run(conn, "outbox_event_facts", {"job_ids": self.array(marked)})
        }
        return [(job_id, *found.get(job_id, (None, None, None))) for job_id in marked]

    def upkeep_due(self, engine: Engine, params: Mapping[str, Any]) -> tuple[list[str], list[str], list[str]]:
        # SQLite's planner keeps no statistics the store relies on, and it drops a row's index entries when
        # the row changes: no dead versions stay behind.
        return [], [], []

    def analyze(self, conn: Connection, table: str, *, lock_timeout: str) -> None:
        self.run(conn, f"analyze_{table}", {})  # (no lock to wait for: the transaction holds the database)

    def vacuum(self, engine: Engine, table: str) -> None:
        pass  # (never worn; SQLite's VACUUM would rebuild the whole file)


# The writer queue of each SQLite file engine, and what tells its relays after a commit that added outbox
# rows (neither for an in-memory database).
_writer_queues: weakref.WeakKeyDictionary[Engine, WriterQueue] = weakref.WeakKeyDictionary()
_notifiers: weakref.WeakKeyDictionary[Engine, Notifier] = weakref.WeakKeyDictionary()


def _taking(row: Mapping[str, Any], window: Window, now: float) -> dict[str, Any]:
    """The parameters of `job_uniques_take` for the job `row` just inserted."""
    return {"tenant": row["tenant"], "unique_key": window.key, "job_id": row["id"],
            "expires_at": window.until, "now": now}  # fmt: skip


def writer_queue_path(database: Path) -> Path:
    """The file the writers on one host queue on, beside the database."""
    # `-write-turn`, the name it had before it was called the writer queue: processes running the earlier
    # code lock the same file, so every writer on the host still waits in one queue.
    return database.with_name(f"{database.name}-write-turn")


def _install_hooks(driver: SQLiteDriver, engine: Engine, synchronous: str) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Stop pysqlite from issuing its own (deferred) BEGIN; `_on_begin` issues ours.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute("PRAGMA foreign_keys=ON")
        # A job's ending cancels the dependents that asked so, and that UPDATE fires the trigger that ended
        # it again for their own dependents (migration 0021): SQLite runs a trigger from its own body only so.
        cursor.execute("PRAGMA recursive_triggers=ON")
        cursor.execute("PRAGMA busy_timeout=0")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # On the driver's connection: SQLAlchemy's execution layer would double what a BEGIN costs at the
        # head of the writer queue. Its errors are SQLAlchemy's all the same, so `transact` retries a busy
        # lock.
        sql = f"BEGIN {conn.get_execution_options().get('sqlite_begin', 'IMMEDIATE')}"
        sending(conn, sql, (), many=False)
        with driver.raised(conn, sql, ()):
            conn.connection.driver_connection.execute(sql)  # type: ignore[union-attr]


DRIVER = SQLiteDriver()

"""One driver per database: what the store does differently on SQLite and on PostgreSQL, behind one interface.

Everything else in `jobstore` is shared and written once: the states and their decisions, the guards every
write runs under, the priorities and the tenants' turns, the flow limits. A driver holds the rest: how an
engine is made and a statement is sent, how rows are locked, how a new job, a claim and a completion are
written (in one statement where the database can write several tables in one, as PostgreSQL can), how the
relay reads and marks the outbox, and how a process hears that outbox rows were committed.

A driver is chosen by the database's name (`of`, `for_url`) and loaded the first time a store of its
database is used, so that a process on SQLite never loads PostgreSQL's statements, and the reverse. The
store's test suite runs every test on both drivers (`tests/support/store.py`).

Each driver lives in a folder of its own (`drivers/sqlite/`, `drivers/postgresql/`) and writes its statements
by hand, as named blocks in the `.sql` files beside its code (`drivers.sqlfile`), sent as written: the store's
modules run a statement by its name (`db.execute`), and each driver holds its own text for it.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL, make_url

from outbox_bridge.jobstore.drivers.sending import sending
from outbox_bridge.jobstore.drivers.sqlfile import Statement, load
from outbox_bridge.jobstore.records import dumps

if TYPE_CHECKING:
    from outbox_bridge.core.settings import Settings

# The databases a store can live in, by SQLAlchemy's name for them.
DRIVERS = ("sqlite", "postgresql")


class Completion(Protocol):
    """One attempt to complete, as `complete_many` takes it (`fenced.Completion`): its fence (job id,
    epoch), its attempt and its output."""

    @property
    def job_id(self) -> str: ...

    @property
    def epoch(self) -> int: ...

    @property
    def attempt_id(self) -> str: ...

    @property
    def output(self) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class Window:
    """The uniqueness window a new job of a kind with `unique_for_seconds` takes at accept (`job_uniques`):
    its key (a digest of the kind and the validated payload, `intake.unique_key`) and when it ends."""

    key: str
    until: float


class ListenerLost(Exception):
    """What a process listened on to hear of committed outbox rows broke (`Notifications.take`)."""


class Notifications(Protocol):
    """What a process listens on to hear that outbox rows were committed (`Driver.listen`): the socket beside
    a SQLite file (`drivers.sqlite.notify_sockets`) or a connection listening on PostgreSQL
    (`drivers.postgresql.listener`). Its `fileno()` turns readable when one arrives."""

    def fileno(self) -> int: ...

    def take(self) -> float | None:
        """The earliest due time announced since the last call, or None; `ListenerLost` when it broke."""

    def close(self) -> None: ...


class Notifier(Protocol):
    """What tells the processes listening on a store that outbox rows committed (`Driver.notifier`)."""

    def notify(self, due: float) -> None:
        """The rows added come due at `due` at the earliest; never blocks, never fails the writer."""


class WriterTurns(Protocol):
    """The queue a store's writers take turns in before they begin (`Driver.writer_turns`)."""

    def held_here(self) -> bool:
        """This thread holds the head of the queue already."""

    def acquire(self, timeout: float) -> bool:
        """Wait at most `timeout` seconds for the head of the queue; whether it was reached."""

    def release(self) -> None: ...


def attempt_ended(
    attempt_id: str,
    outcome: str,
    now: float,
    *,
    output: dict[str, Any] | None = None,
    code: str | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    """The parameters of `end_attempt`: the attempt `attempt_id` ended at `now` with `outcome`."""
    encoded = None if output is None else dumps(output)
    return {"attempt": attempt_id, "outcome": outcome, "now": now, "output": encoded,
            "code": code, "message": message}  # fmt: skip


class UnknownDatabase(ValueError):
    """A database URL names a database the store has no driver for."""


class Driver:
    """The store's operations whose statements differ between databases. Each method is implemented by both
    drivers; a driver's module holds its statements, named, beside the methods that run them."""

    name: ClassVar[str]
    # The folder of the driver's `.sql` files, and those files, in the order they are read: one per area of
    # the store, the same in every driver's folder.
    folder: ClassVar[Path]
    sql_files: ClassVar[tuple[str, ...]] = (
        "accept.sql",
        "claims.sql",
        "completion.sql",
        "outbox.sql",
        "leader.sql",
        "webhooks.sql",
        "schedules.sql",
        "sessions.sql",
        "limits.sql",
        "operator.sql",
        "reads.sql",
        "upkeep.sql",
        "workflows.sql",
    )
    # The statements only this driver sends, from its own methods (the other database does that work
    # differently); every other name is in both drivers' files, for the store's modules to run by name.
    own_statements: ClassVar[frozenset[str]] = frozenset()
    # The execution options of a read transaction.
    read_options: ClassVar[Mapping[str, Any]]

    # --- what the database can do -------------------------------------------------------------------

    def commits_statement_alone(self) -> bool:
        """A statement sent on its own commits by itself (one round trip where BEGIN, the statement and
        COMMIT take three): `db.transact_one` and `db.read_one` use it; where false they are `transact` and
        `read`."""
        raise NotImplementedError

    def calls_may_wait_on_network(self) -> bool:
        """The store is a server: a call may wait on the network, so an event loop hands it to a thread."""
        raise NotImplementedError

    def announces_commits(self) -> bool:
        """Committed outbox rows are announced by the database itself (a trigger's NOTIFY), to listeners."""
        raise NotImplementedError

    def reads_due_in_one_statement(self) -> bool:
        """The relay reads its due rows, their trace context and the next due time in one statement
        (`outbox_read_due`, run by `leader.due_at_once`), committed by itself."""
        raise NotImplementedError

    # --- statements ----------------------------------------------------------------------------------

    @functools.cached_property
    def statements(self) -> dict[str, Statement]:
        """The driver's named statements, read from its `.sql` files."""
        return load(self.folder, self.sql_files)

    def statement(self, name: str) -> Statement:
        """The statement named `name` in the driver's `.sql` files."""
        try:
            return self.statements[name]
        except KeyError:
            raise KeyError(f"the {self.name} driver has no statement named {name!r}") from None

    def array(self, values: Sequence[Any]) -> Any:
        """`values` as one parameter of a statement (a list that `ANY` or `json_each` reads)."""
        raise NotImplementedError

    def queues(self, queues: Collection[str] | None) -> dict[str, Any]:
        """The parameters of a claim's filter on the named queues: `every_queue` (None: no filter), and the
        `queues` it takes jobs of."""
        return {"every_queue": queues is None, "queues": self.array(sorted(queues or ()))}

    def locking(self, name: str) -> str:
        """The statement a claim sends for the read `name`: where the database locks rows, its variant that
        locks the rows it returns and skips those another claimer holds (`<name>_locking`); else `name`
        itself (SQLite's write transactions run one at a time)."""
        return name

    # --- engines and statements ----------------------------------------------------------------------

    def make_engine(
        self, url: URL, settings: Settings, options: dict[str, Any], *, role: str | None, **kwargs: Any
    ) -> Engine:
        """An engine for `url`, its connections named after `role` where the database keeps such names;
        nothing is created on disk."""
        raise NotImplementedError

    def file(self, url: URL) -> Path | None:
        """The file the database lives in, or None (a server, an in-memory database)."""
        raise NotImplementedError

    def execute(
        self, driver_connection: Any, sql: str, values: Any, *, prepared: bool
    ) -> list[tuple[Any, ...]]:
        """Run `sql` on the database driver's own connection; its rows (none for a statement that returns
        none). A `prepared` statement is parsed and planned once per connection where the database can."""
        raise NotImplementedError

    def raised(self, conn: Connection, sql: str, values: Any) -> AbstractContextManager[None]:
        """The database driver's errors in the block raised as SQLAlchemy raises them for `conn.execute`:
        its `DBAPIError` family (`OperationalError`, `IntegrityError`, ...), carrying the statement and the
        driver's own error; a lost connection is invalidated (`db.transact` then runs the transaction again
        on a new one). Every store function runs on a SQLAlchemy `Connection`, often the caller's own
        (`outbox_bridge.enqueue(conn, ...)`), so its callers and `transact`'s retries see one family of errors
        whichever way a statement was sent."""
        raise NotImplementedError

    def run(self, conn: Connection, name: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """Run the statement `name` on `conn`'s driver connection, in its transaction, below SQLAlchemy's
        execution layer (which costs more client CPU than a statement of the path every job takes:
        `docs/scaling.md`); its rows, as tuples (none for a statement that returns none)."""
        return self.send(conn, self.statement(name), params)

    def run_many(self, conn: Connection, name: str, rows: Sequence[Mapping[str, Any]]) -> int:
        """`run` of a statement that returns nothing, once for each of `rows` (one call into the database
        driver); the number of rows it changed in all."""
        return self.send_many(conn, self.statement(name), rows)

    def send(
        self, conn: Connection, statement: Statement, params: Mapping[str, Any]
    ) -> list[tuple[Any, ...]]:
        """`run` of `statement`, named or not."""
        sending(conn, statement.sql, params, many=False)
        with self.raised(conn, statement.sql, params):
            return self.execute(
                conn.connection.driver_connection, statement.sql, params, prepared=statement.prepared
            )

    def send_many(self, conn: Connection, statement: Statement, rows: Sequence[Mapping[str, Any]]) -> int:
        """`run_many` of `statement`, named or not."""
        sending(conn, statement.sql, rows, many=True)
        with self.raised(conn, statement.sql, rows):
            cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
            cursor.executemany(statement.sql, rows)
            return int(cursor.rowcount)

    def check(self, conn: Connection) -> str | None:
        """Why this database cannot hold the store as the store's processes open it, or None."""
        raise NotImplementedError

    # --- write transactions --------------------------------------------------------------------------

    def writer_turns(self, engine: Engine) -> WriterTurns | None:
        """The queue `engine`'s write transactions wait in before they begin, or None (each begins at
        once)."""
        return None

    def still_in_place(self, engine: Engine, conn: Connection) -> bool:
        """What `conn` just committed is in the store `engine` opens (a file can be removed or replaced
        under an open connection: the transaction then runs again)."""
        return True

    def announce(self, engine: Engine, due: float) -> None:
        """A write transaction of `engine` committed outbox rows, due at `due` at the earliest: tell the
        processes listening, where the database does not tell them itself."""
        return None

    # --- hearing of new outbox rows --------------------------------------------------------------------

    def listen(self, settings: Settings, role: str) -> Notifications | None:
        """Listen, as `role`, for outbox rows being committed; None where that cannot be done (an in-memory
        store, a directory that cannot be written, a PostgreSQL that does not answer): the caller polls."""
        raise NotImplementedError

    def notifier(self, engine: Engine) -> Notifier | None:
        """What a writer outside the store's transactions notifies after its commit added outbox rows; None
        where the database announces them itself."""
        raise NotImplementedError

    # --- locks ---------------------------------------------------------------------------------------

    def lock_keys(self, conn: Connection, keys: Iterable[tuple[int, int]]) -> None:
        """Wait for and take this transaction's lock on each (space, key), in the order given, where the
        database needs one (its statement `advisory_lock`); held until the transaction ends."""
        raise NotImplementedError

    # --- the path every job takes --------------------------------------------------------------------

    def insert_jobs(
        self,
        conn: Connection,
        rows: Sequence[Mapping[str, Any]],
        windows: Mapping[str, Window] | None = None,
    ) -> set[str]:
        """Insert the job rows whose tenant + idempotency key is free, and an outbox row for each; the ids
        of the jobs inserted. With `windows` (by job id), only the first row of each tenant + key is
        written, and a job with a window only if no other job holds the window (its `until` not passed at
        the batch's latest `created_at`); it then holds it, and of the batch's jobs of one tenant and window
        the first that can take it does. A key a concurrent transaction took first is `db.Retry`."""
        raise NotImplementedError

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
        """Claim the jobs `attempt_ids` names (`claim_by_ids`, with `params`: `now`, `worker`, `lease_until`,
        `running_since`); with `limited` (the kinds a flow limit concerns), only those no limit concerns;
        with `queues`, only those of these named queues (`queues`); with `drop_pending`, the jobs' pending
        outbox rows are dropped too. The rows it returned (what a
        claim returns), and the ids of the jobs whose first attempt row (under its id in `attempt_ids`) it
        also wrote."""
        raise NotImplementedError

    def complete_many(
        self, conn: Connection, completions: Sequence[Completion], now: float
    ) -> list[tuple[Any, ...]]:
        """Commit each completion under its own fence (`complete_many`): the job and the attempt that
        ended. A row per job completed: its new state, then what `events.Returned` names."""
        raise NotImplementedError

    def mark_published(self, conn: Connection, params: Mapping[str, Any], ids: Sequence[int]) -> list[Any]:
        """Mark the outbox rows `ids` published while the role's token holds (`outbox_mark_published`, with
        `params`: the role's `name`, its `token` and `now`); for each row marked, its job's id, tenant, kind
        and trace context (`outbox.note_published_rows`)."""
        raise NotImplementedError

    # --- upkeep --------------------------------------------------------------------------------------

    def upkeep_due(self, engine: Engine, params: Mapping[str, Any]) -> tuple[list[str], list[str], list[str]]:
        """Read at once (`jobstore.statistics`): the store tables whose planner statistics went stale, those
        holding enough dead row versions to be vacuumed, and those the store's user may do neither for (never
        in the first two)."""
        raise NotImplementedError

    def analyze(self, conn: Connection, table: str, *, lock_timeout: str) -> None:
        """Gather `table`'s planner statistics, waiting at most `lock_timeout` for its lock."""
        raise NotImplementedError

    def vacuum(self, engine: Engine, table: str) -> None:
        """Remove `table`'s dead row versions and their index entries (unless another VACUUM or an ANALYZE
        holds the table: then it is left to that one)."""
        raise NotImplementedError


@functools.cache
def named(name: str) -> Driver:
    """The driver of the database SQLAlchemy calls `name`."""
    # Each driver is imported the first time a store of its database is used, so that a process on SQLite
    # never loads psycopg, and the reverse.
    if name == "sqlite":
        from outbox_bridge.jobstore.drivers.sqlite import DRIVER as SQLITE

        return SQLITE
    if name == "postgresql":
        from outbox_bridge.jobstore.drivers.postgresql import DRIVER as POSTGRESQL

        return POSTGRESQL
    raise UnknownDatabase(f"no store driver for {name!r} databases: the store runs on {', '.join(DRIVERS)}")


def of(bind: Connection | Engine) -> Driver:
    """The driver of the database `bind` is connected to."""
    return named(bind.dialect.name)


def for_url(url: str | URL) -> Driver:
    """The driver of the database `url` names."""
    return named(make_url(url).get_backend_name())

"""`outbox_bridge.enqueue` in the caller's own transaction, on the caller's own engine (a plain
`create_engine`, as an application makes one), beside a business row: a rollback leaves neither, a commit
keeps both and tells the relays; idempotent as `POST /jobs`; the same rules; a store it cannot write as
the deployment does is a clear error."""

from __future__ import annotations

import select
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Column, Connection, Engine, Integer, MetaData, String, Table, create_engine, func
from sqlalchemy import select as sql_select
from sqlalchemy.orm import Session

import outbox_bridge
from outbox_bridge import enqueuing
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, migrate
from outbox_bridge.jobstore.drivers.postgresql.listener import Listener
from outbox_bridge.jobstore.drivers.sqlite import notify_sockets
from outbox_bridge.jobstore.schema import jobs, outbox
from tests.support.store import job_row, new_job

business = MetaData()
orders = Table("team_orders", business, Column("id", Integer, primary_key=True), Column("item", String(50)))
EXPORT = {"rows": 10, "chunk": 5}


@pytest.fixture(autouse=True)
def _deployment_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """enqueue reads the deployment's settings from the environment, once: here, the defaults, in a
    deployment that names the built-in export kind (ALLOWED_KINDS)."""
    for name in ("OUTBOX_BRIDGE_DEV", "MAX_ATTEMPTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ALLOWED_KINDS", "export")
    monkeypatch.chdir(Path(__file__).parent)  # no .env here
    enqueuing._settings.cache_clear()
    yield
    enqueuing._settings.cache_clear()


@pytest.fixture
def app_engine(settings: Settings, engine: Engine) -> Iterator[Engine]:
    """The application's own engine on the store's database, with a business table of its own."""
    own = create_engine(settings.database_url)
    business.create_all(own)
    yield own
    own.dispose()


def counts(engine: Engine) -> tuple[int, int, int]:
    with engine.connect() as conn:
        return tuple(  # type: ignore[return-value]
            conn.execute(sql_select(func.count()).select_from(t)).scalar_one() for t in (orders, jobs, outbox)
        )


def order_and_job(conn: object, key: str = "order-1", payload: dict | None = None) -> outbox_bridge.Job:
    execute = conn.execute  # type: ignore[attr-defined]
    execute(orders.insert().values(item="book"))
    return outbox_bridge.enqueue(
        conn,  # type: ignore[arg-type]
        "export",
        payload or EXPORT,
        key=key,
        tenant="shop",
        owner="checkout",
    )


def test_a_rolled_back_transaction_leaves_no_job_and_no_outbox_row(app_engine: Engine) -> None:
    with app_engine.connect() as conn, conn.begin() as transaction:
        job = order_and_job(conn)
        assert job.state == "queued"
        transaction.rollback()
    assert counts(app_engine) == (0, 0, 0)


def test_a_committed_transaction_keeps_the_row_and_the_job_with_its_outbox_row(
    app_engine: Engine, engine: Engine, settings: Settings
) -> None:
    with app_engine.begin() as conn:
        job = order_and_job(conn)
    assert counts(app_engine) == (1, 1, 1)
    stored = job_row(engine, job.id)
    assert (stored.kind, stored.tenant, stored.owner, stored.max_attempts) == (
        "export",
        "shop",
        "checkout",
        3,
    )
    assert stored.payload == {"rows": 10, "chunk": 5}


def test_an_orm_session_works_the_same(app_engine: Engine) -> None:
    with Session(app_engine) as session:
        with session.begin():
            order_and_job(session, "s-1")
        with session.begin():
            order_and_job(session, "s-2")
            session.rollback()
    assert counts(app_engine) == (1, 1, 1)


def test_the_same_key_twice_is_one_job_and_another_request_under_it_is_a_conflict(app_engine: Engine) -> None:
    with app_engine.begin() as conn:
        first = order_and_job(conn)
    with app_engine.begin() as conn:
        again = outbox_bridge.enqueue(conn, "export", EXPORT, key="order-1", tenant="shop", owner="checkout")
    assert again.id == first.id
    with pytest.raises(outbox_bridge.Conflict) as conflict, app_engine.begin() as conn:
        outbox_bridge.enqueue(
            conn, "export", {"rows": 11, "chunk": 5}, key="order-1", tenant="shop", owner="x"
        )
    assert conflict.value.status == 409 and conflict.value.job_id == first.id
    with app_engine.begin() as conn:  # the key is the tenant's: another tenant's is another job
        other = outbox_bridge.enqueue(conn, "export", EXPORT, key="order-1", tenant="books", owner="checkout")
    assert other.id != first.id


def test_a_concurrency_key_is_stored_in_the_callers_transaction_and_part_of_the_request(
    app_engine: Engine, engine: Engine
) -> None:
    def keyed(conn: Connection, concurrency_key: str | None) -> outbox_bridge.Job:
        return outbox_bridge.enqueue(
            conn,
            "export",
            EXPORT,
            key="order-1",
            tenant="shop",
            owner="checkout",
            concurrency_key=concurrency_key,
        )

    with app_engine.connect() as conn, conn.begin() as transaction:
        keyed(conn, "customer-7")
        transaction.rollback()
    assert counts(app_engine) == (0, 0, 0)
    with app_engine.begin() as conn:
        job = keyed(conn, "customer-7")
    assert (job.concurrency_key, job.held_by) == ("customer-7", None)
    assert job_row(engine, job.id).concurrency_key == "customer-7"
    with app_engine.begin() as conn:
        assert keyed(conn, "customer-7").id == job.id
    for other in ("customer-8", None):
        with pytest.raises(outbox_bridge.Conflict) as conflict, app_engine.begin() as conn:
            keyed(conn, other)
        assert conflict.value.job_id == job.id
    assert counts(app_engine) == (0, 1, 1)


@pytest.mark.parametrize(
    ("kind", "payload", "options", "said"),
    [
        ("resize_image", {}, {}, "accepts these kinds"),
        ("export", {"rows": "ten"}, {}, "not a valid export payload"),
        ("noop", {}, {}, "accepts these kinds"),  # a test kind, outside a development setup
        ("export", EXPORT, {"delay_seconds": 5, "run_at": "2026-01-01T00:00:00Z"}, "not both"),
        ("export", EXPORT, {"priority": "urgent"}, "schema"),
        ("export", EXPORT, {"concurrency_key": ""}, "schema"),
        ("export", EXPORT, {"concurrency_key": "k" * 129}, "schema"),
        ("export", EXPORT, {"concurrency_key": "a\x00b"}, "schema"),
        ("export", EXPORT, {"key": ""}, "key must be"),
        ("export", EXPORT, {"tenant": "a b"}, "tenant must be"),
    ],
)
def test_what_post_jobs_refuses_enqueue_refuses_with_invalid_job_and_writes_nothing(
    app_engine: Engine, kind: str, payload: dict, options: dict, said: str
) -> None:
    arguments = {"key": "k", "tenant": "shop", "owner": "checkout", **options}
    with pytest.raises(outbox_bridge.InvalidJob, match=said) as refused, app_engine.begin() as conn:
        outbox_bridge.enqueue(conn, kind, payload, **arguments)
    assert isinstance(refused.value, ValueError)
    assert counts(app_engine) == (0, 0, 0)


def test_the_deployments_settings_are_read_from_the_environment(
    app_engine: Engine, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAX_ATTEMPTS", "7")
    monkeypatch.setenv("OUTBOX_BRIDGE_DEV", "1")
    monkeypatch.delenv("ALLOWED_KINDS")
    enqueuing._settings.cache_clear()
    with app_engine.begin() as conn:
        job = outbox_bridge.enqueue(conn, "noop", {}, key="k", tenant="shop", owner="checkout")
    assert job_row(engine, job.id).max_attempts == 7


@pytest.mark.databases("sqlite")
def test_on_sqlite_the_relays_are_notified_after_the_commit_not_before(
    app_engine: Engine, settings: Settings
) -> None:
    database = db.sqlite_path(settings)
    assert database is not None
    socket = notify_sockets.NotifySocket.open(notify_sockets.directory_for(database))
    assert socket is not None
    try:
        with app_engine.begin() as conn:
            order_and_job(conn)
            assert select.select([socket], [], [], 0.2)[0] == [], "notified before the commit"
        assert select.select([socket], [], [], 5)[0] == [socket], "not notified after the commit"
    finally:
        socket.close()


@pytest.mark.databases("postgresql")
def test_on_postgresql_the_relays_are_notified_at_the_commit(app_engine: Engine, settings: Settings) -> None:
    listener = Listener.open(settings.database_url)
    assert listener is not None
    try:
        with app_engine.begin() as conn:
            order_and_job(conn)
            assert select.select([listener], [], [], 0.2)[0] == [], "notified before the commit"
        assert select.select([listener], [], [], 5)[0] == [listener], "not notified after the commit"
        assert listener.take() is not None
    finally:
        listener.close()


@pytest.mark.databases("sqlite")
def test_a_sqlite_database_not_in_wal_mode_is_a_clear_error(tmp_path: Path) -> None:
    plain = tmp_path / "plain.db"
    sqlite3.connect(plain).close()
    own = create_engine(f"sqlite:///{plain}")
    try:
        with pytest.raises(outbox_bridge.StoreMismatch, match="WAL"), own.begin() as conn:
            outbox_bridge.enqueue(conn, "export", EXPORT, key="k", tenant="shop", owner="checkout")
    finally:
        own.dispose()


def test_a_store_whose_schema_is_not_current_is_a_clear_error(settings: Settings, tmp_path: Path) -> None:
    if settings.is_sqlite:
        empty = tmp_path / "empty.db"
        with sqlite3.connect(empty) as raw:
            raw.execute("PRAGMA journal_mode=WAL")
        url = f"sqlite:///{empty}"
    else:
        url = settings.database_url  # the test's database, not initialised: no `engine` fixture here
    own = create_engine(url)
    try:
        with pytest.raises(outbox_bridge.StoreMismatch, match="db upgrade"), own.begin() as conn:
            outbox_bridge.enqueue(conn, "export", EXPORT, key="k", tenant="shop", owner="checkout")
    finally:
        own.dispose()


@pytest.mark.databases("sqlite")
def test_an_engines_first_enqueue_reads_nothing_in_the_callers_transaction_before_it_writes(
    app_engine: Engine, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On SQLite a transaction that began by reading cannot write once another process committed after
    # that read: its write fails at once with "database is locked". An engine's first enqueue checks the
    # store (its schema revision); here another writer commits right after that check, as a busy
    # deployment's processes do.
    read_revision = migrate.revision_of

    def then_another_commits(conn: Connection) -> str | None:
        revision = read_revision(conn)
        new_job(engine, key="meanwhile")
        return revision

    monkeypatch.setattr(migrate, "revision_of", then_another_commits)
    with app_engine.begin() as conn, conn.begin_nested():  # a savepoint: a transaction SQLite began
        job = outbox_bridge.enqueue(conn, "export", EXPORT, key="first", tenant="shop", owner="checkout")
    assert job_row(engine, job.id).operation_key == "first"

"""Schema migrations on SQLite and on PostgreSQL, whatever TEST_DATABASES says: from nothing and from the
first released schema (0001) to head, with the data written at 0001 kept; the migrated schema is the code's
(`jobstore.schema.metadata`); `outbox-bridge db upgrade` works as a command; and the long-running commands
refuse, with a clear message and exit code 1, a store that is missing, unmigrated or unreachable."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine, func, select, text

from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.base import FILE_KEY, file_of
from outbox_bridge.jobstore import claiming, db, fenced, intake, migrate, queries
from outbox_bridge.jobstore.priorities import Priority
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.schema import jobs, metadata, outbox
from outbox_bridge.jobstore.states import State
from tests.conftest import make_settings, new_postgres_schema
from tests.support import procs
from tests.support.templates import Templates

# What this file shows is about SQLite itself (or runs its own stores): once, on SQLite.
pytestmark = pytest.mark.databases("sqlite")

FIRST_RELEASE = "0001"
T0 = 1_700_000_000.0
COMMAND_TIMEOUT = 60


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty store of this test's own: an empty SQLite file (engines never create one), or a fresh
    PostgreSQL schema."""
    if request.param == "sqlite":
        (tmp_path / "jobs.db").touch()
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def store_settings(tmp_path: Path, store_url: str) -> Settings:
    return make_settings(tmp_path, database_url=store_url)


@pytest.fixture
def bare_engine(store_settings: Settings) -> Iterator[Engine]:
    """An engine on the empty store; nothing migrated."""
    engine = db.make_engine(store_settings)
    yield engine
    engine.dispose()


def schema_differences(engine: Engine) -> list[object]:
    """What autogenerate would change to make the database match the code's schema."""
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(context, metadata))


def run_command(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """`outbox-bridge ARGS` as a user runs it, with `settings` in its environment."""
    return subprocess.run(
        [str(procs.BIN), *args],
        env=procs.settings_env(settings),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )


def test_upgrade_from_nothing_reaches_head_and_matches_the_code_schema(bare_engine: Engine) -> None:
    assert migrate.current_revision(bare_engine) is None
    with pytest.raises(migrate.SchemaNotCurrent, match="outbox-bridge db upgrade"):
        migrate.check_current(bare_engine)

    migrate.upgrade(bare_engine)

    assert migrate.current_revision(bare_engine) == migrate.head_revision()
    migrate.check_current(bare_engine)
    assert schema_differences(bare_engine) == []


def test_a_store_copied_from_the_tests_template_is_the_migrated_store(
    store_settings: Settings, bare_engine: Engine, store_templates: Templates, tmp_path: Path
) -> None:
    """The other tests' stores are copies (`tests.support.templates`): each must be what the migrations
    make, tables, indexes, triggers, functions and version alike."""
    migrate.upgrade(bare_engine)
    copies = []
    for name in ("first", "second"):  # the second is a copy even where the first recorded the template
        url = store_settings.database_url
        if db.sqlite_path(store_settings) is not None:
            url = f"sqlite:///{tmp_path / name}.db"
        else:
            url = new_postgres_schema(url.split("?")[0])
        settings = make_settings(tmp_path / name, database_url=url)
        engine = db.make_engine(settings)
        store_templates.init_schema(settings, engine)
        copies.append(engine)

    try:
        assert catalog(copies[1]) == catalog(bare_engine)
        assert schema_differences(copies[1]) == []
    finally:
        for engine in copies:
            engine.dispose()


def catalog(engine: Engine) -> list[tuple[object, ...]]:
    """Everything a store's schema holds, without the name of the PostgreSQL schema it is in."""
    if engine.dialect.name == "sqlite":
        queries = ["SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"]
    else:
        queries = [
            "SELECT table_name, column_name, data_type, column_default, is_nullable"
            " FROM information_schema.columns WHERE table_schema = current_schema() ORDER BY 1, 2",
            "SELECT indexname, replace(indexdef, current_schema() || '.', '')"
            " FROM pg_indexes WHERE schemaname = current_schema() ORDER BY 1",
            "SELECT conname, pg_get_constraintdef(c.oid) FROM pg_constraint c"
            " JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = current_schema() ORDER BY 1",
            "SELECT trigger_name, event_manipulation, event_object_table, action_statement"
            " FROM information_schema.triggers WHERE trigger_schema = current_schema() ORDER BY 1, 2",
            "SELECT proname, prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = current_schema() ORDER BY 1",
        ]
    queries.append("SELECT version_num FROM alembic_version")
    with engine.connect() as conn:
        return [tuple(row) for query in queries for row in conn.exec_driver_sql(query)]


def test_upgrading_a_current_store_again_changes_nothing(bare_engine: Engine) -> None:
    migrate.upgrade(bare_engine)
    migrate.upgrade(bare_engine)
    assert migrate.current_revision(bare_engine) == migrate.head_revision()
    assert schema_differences(bare_engine) == []


# Rows as the first released schema (0001) stores them, written with its own columns, not the code's.
QUEUED_JOB = {
    "id": "job-queued", "tenant": "acme", "owner": "ann", "operation_key": "k-queued",
    "fingerprint": "f" * 64, "kind": "noop", "payload": '{"n":1}', "state": "queued",
    "epoch": 0, "attempts": 0, "max_attempts": 3, "available_at": T0, "cancel_requested": False,
    "created_at": T0, "updated_at": T0,
}  # fmt: skip
DONE_JOB = {
    **QUEUED_JOB, "id": "job-done", "operation_key": "k-done", "state": "succeeded", "epoch": 1,
    "attempts": 1, "result_attempt_id": "attempt-done", "started_at": T0 + 1, "finished_at": T0 + 2,
    "updated_at": T0 + 2,
}  # fmt: skip
DONE_ATTEMPT = {
    "id": "attempt-done", "job_id": "job-done", "epoch": 1, "worker": "w-1", "started_at": T0 + 1,
    "ended_at": T0 + 2, "outcome": "succeeded", "output": '{"ok":true}',
}  # fmt: skip


def write_at_first_release(conn: Connection) -> None:
    for job in (QUEUED_JOB, DONE_JOB):
        insert_row(conn, "jobs", job)
    insert_row(conn, "attempts", DONE_ATTEMPT)
    for job_id, published_at in (("job-queued", None), ("job-done", T0 + 1)):
        row = {"job_id": job_id, "created_at": T0, "available_at": T0, "publish_attempts": 1}
        insert_row(conn, "outbox", {**row, "published_at": published_at})


def insert_row(conn: Connection, table: str, row: dict[str, object]) -> None:
    names = ", ".join(row)
    values = ", ".join(f":{name}" for name in row)
    conn.execute(text(f"INSERT INTO {table} ({names}) VALUES ({values})"), row)


def test_data_written_at_the_first_released_schema_survives_the_upgrade_to_head(bare_engine: Engine) -> None:
    migrate.upgrade(bare_engine, FIRST_RELEASE)
    assert migrate.current_revision(bare_engine) == FIRST_RELEASE
    db.transact(bare_engine, write_at_first_release)

    migrate.upgrade(bare_engine)

    assert migrate.current_revision(bare_engine) == migrate.head_revision()
    assert schema_differences(bare_engine) == []
    queued = db.read(bare_engine, queries.get_job, "job-queued")
    done = db.read(bare_engine, queries.get_job, "job-done")
    assert queued is not None and done is not None
    assert (queued.state, queued.payload, queued.available_at) == (State.QUEUED, {"n": 1}, T0)
    assert (done.state, done.epoch, done.result_attempt_id) == (State.SUCCEEDED, 1, "attempt-done")
    result = db.read(bare_engine, queries.committed_result, "job-done")
    assert result is not None and result.output == {"ok": True}
    assert db.read(bare_engine, pending_outbox_jobs) == ["job-queued"]
    assert (queued.priority, done.priority) == (Priority.NORMAL, Priority.NORMAL)
    assert db.read(bare_engine, outbox_orders) == [("acme", 1), ("acme", 1)], "rows take their job's tenant"


def test_the_store_keeps_working_on_data_migrated_from_the_first_release(bare_engine: Engine) -> None:
    migrate.upgrade(bare_engine, FIRST_RELEASE)
    db.transact(bare_engine, write_at_first_release)
    migrate.upgrade(bare_engine)
    now = T0 + 10

    claimed = db.transact(bare_engine, claiming.claim, "job-queued", "w-2", now, 30.0).claim
    assert claimed is not None and claimed.epoch == 1
    state = db.transact(bare_engine, fenced.complete, "job-queued", 1, claimed.attempt_id, {"n": 1}, now + 1)
    assert state is State.SUCCEEDED
    accepted = db.transact(
        bare_engine, intake.accept, tenant="acme", owner="ann", kind="noop", payload={},
        operation_key="k-new", now=now, max_attempts=3,
    )  # fmt: skip
    assert accepted.created
    assert db.read(bare_engine, outbox_ids_in_order) == [1, 2, 3], "new outbox ids follow the migrated ones"


def test_0006_adds_an_empty_trace_context_to_the_jobs_already_there(bare_engine: Engine) -> None:
    migrate.upgrade(bare_engine, "0005")
    db.transact(bare_engine, write_at_first_release)
    migrate.upgrade(bare_engine, "0006")
    traces = db.read(
        bare_engine, lambda conn: list(conn.execute(text("SELECT traceparent FROM jobs")).scalars())
    )
    assert traces == [None, None]

    migrate.upgrade(bare_engine, migrate.head_revision())  # the code's statements need every later column
    assert [job.traceparent for job in db.read(bare_engine, all_jobs)] == [None, None]
    traced = db.transact(
        bare_engine, intake.accept, tenant="acme", owner="ann", kind="noop", payload={},
        operation_key="k-traced", now=T0, max_attempts=3, traceparent=TRACE,
    )  # fmt: skip
    again = db.read(bare_engine, queries.get_job, traced.job.id)
    assert again is not None and again.traceparent == TRACE


def test_0006_downgrades_to_0005_keeping_the_jobs(bare_engine: Engine) -> None:
    migrate.upgrade(bare_engine, "0006")
    db.transact(bare_engine, write_at_first_release)
    downgrade(bare_engine, "0005")

    assert migrate.current_revision(bare_engine) == "0005"
    columns = db.read(bare_engine, lambda conn: set(conn.execute(text("SELECT * FROM jobs")).keys()))
    assert "traceparent" not in columns and "run_at" in columns
    assert db.read(bare_engine, lambda conn: conn.execute(text("SELECT count(*) FROM jobs")).scalar()) == 2


TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def all_jobs(conn: Connection) -> list[Job]:
    return [Job.from_row(row) for row in conn.execute(select(jobs).order_by(jobs.c.id)).mappings()]


def downgrade(engine: Engine, revision: str) -> None:
    config = migrate._config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)


def pending_outbox_jobs(conn: Connection) -> list[str]:
    query = select(outbox.c.job_id).where(outbox.c.published_at.is_(None)).order_by(outbox.c.id)
    return list(conn.execute(query).scalars())


def outbox_orders(conn: Connection) -> list[tuple[str, int]]:
    query = select(outbox.c.tenant, outbox.c.priority).order_by(outbox.c.id)
    return [(str(tenant), int(priority)) for tenant, priority in conn.execute(query)]


def outbox_ids_in_order(conn: Connection) -> list[int]:
    return list(conn.execute(select(outbox.c.id).order_by(outbox.c.id)).scalars())


def outbox_rows(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(outbox)).scalar_one())


def test_db_upgrade_command_migrates_an_empty_store_to_head(
    store_settings: Settings, bare_engine: Engine
) -> None:
    done = run_command(store_settings, "db", "upgrade")

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"schema empty -> {migrate.head_revision()}" in done.stdout
    assert migrate.current_revision(bare_engine) == migrate.head_revision()
    assert schema_differences(bare_engine) == []


def test_db_upgrade_command_takes_a_first_release_store_to_head(
    store_settings: Settings, bare_engine: Engine
) -> None:
    migrate.upgrade(bare_engine, FIRST_RELEASE)
    db.transact(bare_engine, write_at_first_release)

    done = run_command(store_settings, "db", "upgrade")

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"schema {FIRST_RELEASE} -> {migrate.head_revision()}" in done.stdout
    assert db.read(bare_engine, outbox_rows) == 2


def assert_refused(result: subprocess.CompletedProcess[str], *phrases: str) -> None:
    said = result.stdout + result.stderr
    assert result.returncode == 1, said
    assert "Traceback" not in said, said
    for phrase in phrases:
        assert phrase in said, said


def touch_store(engine: Engine) -> None:
    """Open the empty store once."""
    db.read(engine, lambda conn: conn.execute(text("SELECT 1")).scalar())


def test_api_refuses_an_unmigrated_store_naming_db_upgrade(
    store_settings: Settings, bare_engine: Engine
) -> None:
    touch_store(bare_engine)

    refused = run_command(store_settings, "api", "--port", str(procs.free_port()))

    assert_refused(refused, "not migrated", "outbox-bridge db upgrade")
    assert migrate.current_revision(bare_engine) is None, "the refusal wrote nothing"


@pytest.mark.parametrize("command", ["relay", "consumer", "worker"])
def test_other_processes_refuse_an_unmigrated_store_too(tmp_path: Path, command: str) -> None:
    settings = make_settings(tmp_path)
    (tmp_path / "jobs.db").touch()
    engine = db.make_engine(settings)
    touch_store(engine)
    engine.dispose()

    assert_refused(run_command(settings, command), "not migrated", "outbox-bridge db upgrade")


def test_api_refuses_a_missing_sqlite_store_without_creating_it(tmp_path: Path) -> None:
    path = tmp_path / "absent" / "jobs.db"
    settings = make_settings(tmp_path, database_url=f"sqlite:///{path}")

    refused = run_command(settings, "api", "--port", str(procs.free_port()))

    assert_refused(refused, "no store at", "outbox-bridge db init")
    assert not path.parent.exists()


def test_db_upgrade_refuses_a_missing_sqlite_store_without_creating_it(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    settings = make_settings(tmp_path, database_url=f"sqlite:///{path}")

    refused = run_command(settings, "db", "upgrade")

    assert_refused(refused, "no store at", "outbox-bridge db init")
    assert not path.exists()


def test_api_refuses_an_unreachable_postgresql_with_a_message_not_a_traceback(tmp_path: Path) -> None:
    closed_port = procs.free_port()
    url = f"postgresql+psycopg://postgres:s3cret@127.0.0.1:{closed_port}/outbox"
    settings = make_settings(tmp_path, database_url=url)

    refused = run_command(settings, "api", "--port", str(procs.free_port()))

    assert_refused(refused, "cannot reach the store", f"127.0.0.1:{closed_port}")
    assert "s3cret" not in refused.stdout + refused.stderr, "the password is not printed"


@pytest.mark.slow
def test_api_on_postgresql_serves_once_db_upgrade_has_run(tmp_path: Path, postgres_url: str) -> None:
    settings = make_settings(tmp_path, database_url=postgres_url)
    port = procs.free_port()
    assert_refused(run_command(settings, "api", "--port", str(port)), "outbox-bridge db upgrade")
    assert run_command(settings, "db", "upgrade").returncode == 0

    api = procs.start(["api", "--port", str(port)], settings, tmp_path / "logs", "api")
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/readyz", api, timeout=30)
    finally:
        assert api.terminate(timeout=30) == 0, api.output()[-2000:]


def test_0012_moves_an_exports_file_under_its_own_key_and_leaves_other_outputs(bare_engine: Engine) -> None:
    migrate.upgrade(bare_engine, "0011")
    legacy = {"path": "job-done/attempt-done.csv", "media_type": "text/csv", "rows": 3}

    def write(conn: Connection) -> None:
        write_at_first_release(conn)
        conn.execute(text("UPDATE jobs SET kind = 'export' WHERE id = 'job-done'"))
        update = text("UPDATE attempts SET output = :o WHERE id = 'attempt-done'")
        conn.execute(update, {"o": json.dumps(legacy)})

    db.transact(bare_engine, write)
    migrate.upgrade(bare_engine, "0012")
    result = db.read(bare_engine, queries.committed_result, "job-done")
    assert result is not None
    assert result.output == {"rows": 3, FILE_KEY: {"path": legacy["path"], "media_type": "text/csv"}}
    assert file_of(result.output) == (legacy["path"], "text/csv")

    downgrade(bare_engine, "0011")
    again = db.read(bare_engine, queries.committed_result, "job-done")
    assert again is not None and again.output == legacy

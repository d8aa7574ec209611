"""Schema migrations (Alembic) for SQLite and PostgreSQL, run on the store's own engine."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db


class SchemaNotCurrent(RuntimeError):
    """The database is not migrated to the code's schema: run `outbox-bridge db upgrade`."""


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", "outbox_bridge.jobstore:migrations")
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The database's revision (None when not initialised). Read through the store's retrying read: a plain
    connection would open SQLite's write transaction (`BEGIN IMMEDIATE`) and fail while a writer holds it."""
    return db.read(engine, _revision)


def _revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


def revision_of(conn: Connection) -> str | None:
    """The revision of the database `conn` is on, read in the caller's transaction (None: not initialised)."""
    return _revision(conn)


def init_schema(settings: Settings, engine: Engine) -> None:
    """Create the database file and its directory (SQLite) and the results directory, and migrate the
    schema to the current revision; idempotent. The only place a SQLite store is created."""
    path = db.sqlite_path(settings)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o644, exist_ok=True)  # SQLite takes an empty file for an empty database
    settings.results_dir.mkdir(parents=True, exist_ok=True)
    upgrade(engine)


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply migrations up to `revision` in one transaction."""
    config = _config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def check_current(engine: Engine) -> None:
    """Raise `SchemaNotCurrent` unless the database is at the code's head revision."""
    current, head = current_revision(engine), head_revision()
    if current != head:
        raise SchemaNotCurrent(
            f"database schema is at {current or 'nothing (not initialised)'}, the code needs {head}: "
            "run `outbox-bridge db upgrade`"
        )

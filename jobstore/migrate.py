"""Schema migrations (Alembic) for SQLite and PostgreSQL, run on the store's own engine.

Every process checks at start that its store is at the code's revision (`check_current`): that check reads
the `alembic_version` table itself and compares it with `HEAD`, so a process that migrates nothing never
imports Alembic (a tenth of a second of every start). A test holds `HEAD` to the migrations' own head."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db

if TYPE_CHECKING:
    from alembic.config import Config

# The newest migration's revision: what `db upgrade` migrates to (`tests/unit/test_migration_head.py`).
HEAD = "0021"


class SchemaNotCurrent(RuntimeError):
    """The database is not migrated to the code's schema: run `outbox-bridge db upgrade`."""


def _config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", "outbox_bridge.jobstore:migrations")
    return config


def head_revision() -> str:
    """The code's schema revision."""
    return HEAD


def migrations_head() -> str | None:
    """The head revision of the migrations themselves, as Alembic reads their files."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The database's revision (None when not initialised). Read through the store's retrying read: a plain
    connection would open SQLite's write transaction (`BEGIN IMMEDIATE`) and fail while a writer holds it."""
    return db.read(engine, _revision)


def _revision(conn: Connection) -> str | None:
    [(tables,)] = db.execute(conn, "schema_revision_table")
    if not tables:
        return None
    rows = db.execute(conn, "schema_revision")
    return str(rows[0][0]) if rows else None


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
    from alembic import command

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

"""Migrated stores for tests, made once per test process and copied for each test.

Running every migration for each of a thousand tests costs more than most of those tests: the migrations
are exercised where they are the subject (tests/integration/test_migrations.py, which also checks that a
migrated store matches the code's schema). Everywhere else a test's store starts as a copy of one migrated
at the start of the test process: a SQLite file copied byte for byte, or on PostgreSQL the statements the
migrations sent, recorded once and sent again in one round trip to the test's own schema.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from sqlalchemy import Engine

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, migrate


class Templates:
    """The migrated store of each kind, made at first use."""

    def __init__(self) -> None:
        self._directory = Path(tempfile.mkdtemp(prefix="outbox-bridge-templates-"))
        self._sqlite: Path | None = None
        self._postgresql: str | None = None

    def init_schema(self, settings: Settings, engine: Engine) -> None:
        """What `migrate.init_schema` makes of an empty store, by copying: `engine`'s store must be new."""
        settings.results_dir.mkdir(parents=True, exist_ok=True)
        path = db.sqlite_path(settings)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self._sqlite_template(), path)
            return
        script = self._postgresql_script(settings, engine)
        with engine.begin() as conn:
            conn.exec_driver_sql(script)

    def close(self) -> None:
        shutil.rmtree(self._directory, ignore_errors=True)

    def _sqlite_template(self) -> Path:
        if self._sqlite is None:
            path = self._directory / "jobs.db"
            settings = Settings(database_url=f"sqlite:///{path}", results_dir=self._directory / "results")
            engine = db.make_engine(settings)
            migrate.init_schema(settings, engine)
            engine.dispose()  # the last connection to close checkpoints the write-ahead log into the file
            assert not path.with_name("jobs.db-wal").exists(), "the template's log was not checkpointed"
            self._sqlite = path
        return self._sqlite

    def _postgresql_script(self, settings: Settings, engine: Engine) -> str:
        """The statements the migrations send to an empty schema, as one script. Recorded from the first
        test's own migration, which therefore runs for real."""
        if self._postgresql is None:
            with db.statements_seen(engine) as seen:
                migrate.upgrade(engine)
            sent = [s for s in seen if _writes(s.sql)]
            for s in sent:
                assert not s.parameters, f"a migration statement with parameters: {s.sql!r}"
            self._postgresql = ";\n".join(s.sql.strip().rstrip(";") for s in sent) + ";"
            return "SELECT 1"  # this store is migrated already
        return self._postgresql


def _writes(statement: str) -> bool:
    """A statement that changes the schema or its version; what the migrations only read is left out."""
    return not statement.lstrip().upper().startswith(("SELECT", "SHOW"))

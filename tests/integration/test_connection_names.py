"""On PostgreSQL a process's store connections carry its role and process id (`application_name`), so that
an operator tells them apart in `pg_stat_activity`; a URL that names them keeps its own name."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable

import pytest
from sqlalchemy import Engine, text

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.drivers.postgresql.listener import Listener

pytestmark = pytest.mark.databases("postgresql")


def name_of(engine: Engine) -> str:
    with engine.connect() as conn:
        return str(conn.execute(text("SELECT current_setting('application_name')")).scalar_one())


def test_a_process_connections_carry_its_role_and_process_id(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory()
    relay, tool = db.make_engine(settings, "relay"), db.make_engine(settings)
    try:
        assert name_of(relay) == f"outbox-bridge:relay:{os.getpid()}"
        assert name_of(tool) == f"outbox-bridge:{os.getpid()}"
    finally:
        relay.dispose()
        tool.dispose()

    ours = f"outbox-bridge:relay:{uuid.uuid4().hex}"
    listener = Listener.open(settings.database_url, role="relay", application_name=ours)
    assert listener is not None
    try:
        assert ours in listening(settings)
    finally:
        listener.close()


def test_a_url_that_names_its_connections_keeps_its_name(settings_factory: Callable[..., Settings]) -> None:
    url, theirs = settings_factory().database_url, f"billing-{uuid.uuid4().hex}"
    settings = settings_factory(database_url=f"{url}&application_name={theirs}")
    engine = db.make_engine(settings, "relay")
    try:
        assert name_of(engine) == theirs
    finally:
        engine.dispose()
    ours = f"outbox-bridge:relay:{uuid.uuid4().hex}"
    listener = Listener.open(settings.database_url, role="relay", application_name=ours)
    assert listener is not None
    try:
        names = listening(settings)
        assert theirs in names and ours not in names
    finally:
        listener.close()


def listening(settings: Settings) -> set[str]:
    """The names of the connections listening on the store's server now."""
    engine = db.make_engine(settings)
    try:
        with engine.connect() as conn:
            query = text("SELECT application_name FROM pg_stat_activity WHERE query LIKE 'LISTEN %'")
            return {str(name) for name in conn.execute(query).scalars()}
    finally:
        engine.dispose()

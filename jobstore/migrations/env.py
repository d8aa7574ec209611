"""Alembic environment: migrations run on a connection handed in by jobstore.migrate."""

from __future__ import annotations

from alembic import context

from outbox_bridge.jobstore.schema import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()

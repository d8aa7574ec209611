"""A schedule's concurrency key (`schedules add --concurrency-key`): every job the schedule makes carries it,
so at most `CONCURRENCY_KEY_MAX_RUNNING` of them run at once (one by default: a slot's job waits for the
last slot's to end instead of running beside it). See `jobstore.schedules`.

Adding a nullable column rewrites no existing row on either database.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("schedules", sa.Column("concurrency_key", sa.String(128)))


def downgrade() -> None:
    # In place on both databases, as 0015 and 0016 drop their columns.
    op.execute("ALTER TABLE schedules DROP COLUMN concurrency_key")

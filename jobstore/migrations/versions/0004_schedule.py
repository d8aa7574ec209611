"""Delayed jobs: the start a request asked for (`delay_seconds` or `run_at`), kept for the job view.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("run_at", sa.Float()))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("run_at")

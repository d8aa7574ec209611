"""Per-kind policy and named queues: the queue a job runs on (`jobs.queue`, `default` for every job written
before), how often its kind snoozed it (`jobs.snoozes`), the schedules declared in code
(`schedules.declared`) and the jobs that hold a kind's uniqueness window (`job_uniques`).

A column added with a constant default rewrites no existing row on PostgreSQL (11 and later) nor on SQLite.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("queue", sa.String(64), nullable=False, server_default="default"))
    op.add_column("jobs", sa.Column("snoozes", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("schedules", sa.Column("declared", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        "job_uniques",
        sa.Column("tenant", sa.String(255), nullable=False),
        sa.Column("unique_key", sa.String(64), nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_job_uniques_job_id_jobs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("tenant", "unique_key", name="pk_job_uniques"),
    )
    op.create_index("ix_job_uniques_job_id", "job_uniques", ["job_id"])


def downgrade() -> None:
    op.drop_table("job_uniques")
    # In place on both databases, as 0015 to 0019 drop their columns.
    op.execute("ALTER TABLE schedules DROP COLUMN declared")
    op.execute("ALTER TABLE jobs DROP COLUMN snoozes")
    op.execute("ALTER TABLE jobs DROP COLUMN queue")

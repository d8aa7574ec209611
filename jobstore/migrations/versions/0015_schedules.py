"""Schedules and paused kinds: the schedules an operator adds per tenant (`jobstore.schedules`), the name of
the schedule that made a job (`jobs.schedule_name`, null for every job accepted before), the kinds an
operator paused (`jobstore.pausing`), and the record of what operators did to both.

Adding a nullable column rewrites no existing row on either database.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("schedule_name", sa.String(128)))
    op.create_table(
        "schedules",
        sa.Column("tenant", sa.String(255), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("cron", sa.String(255)),
        sa.Column("timezone", sa.String(64)),
        sa.Column("every_seconds", sa.Integer()),
        sa.Column("catch_up", sa.String(8), nullable=False),
        sa.Column("next_slot_at", sa.Float(), nullable=False),
        sa.Column("last_slot_at", sa.Float()),
        sa.Column("last_job_id", sa.String(36)),
        sa.Column("paused_at", sa.Float()),
        sa.Column("paused_by", sa.String(255)),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "name", name="pk_schedules"),
    )
    op.create_table(
        "paused_kinds",
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("paused_at", sa.Float(), nullable=False),
        sa.Column("paused_by", sa.String(255), nullable=False),
        sa.Column("note", sa.Text()),
        sa.PrimaryKeyConstraint("kind", name="pk_paused_kinds"),
    )
    op.create_table(
        "schedule_actions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(255), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_schedule_actions"),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "kind_actions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("note", sa.Text()),
        sa.Column("at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_kind_actions"),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    op.drop_table("kind_actions")
    op.drop_table("schedule_actions")
    op.drop_table("paused_kinds")
    op.drop_table("schedules")
    # In place on both databases (SQLite since 3.35), as 0013 drops its columns: a batch rebuild of `jobs`
    # would drop the triggers 0014 put on it.
    op.execute("ALTER TABLE jobs DROP COLUMN schedule_name")

"""Flow limits: a job's concurrency key (`POST /jobs`'s `concurrency_key`), the limit that holds a queued job
back (`jobs.held_by`), their two partial indexes (holding only held and keyed jobs: empty where no limit is
used), and when each rate-limited kind may next start a job (`kind_rates`). See `jobstore.limits`.

Adding nullable columns rewrites no existing row on either database.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("concurrency_key", sa.String(128)))
    op.add_column("jobs", sa.Column("held_by", sa.String(16)))
    held = sa.text("held_by IS NOT NULL")
    op.create_index(
        "ix_jobs_held_kind_priority",
        "jobs",
        ["kind", "priority", "available_at"],
        postgresql_where=held,
        sqlite_where=held,
    )
    keyed = sa.text("concurrency_key IS NOT NULL")
    op.create_index(
        "ix_jobs_key_state",
        "jobs",
        ["tenant", "concurrency_key", "state"],
        postgresql_where=keyed,
        sqlite_where=keyed,
    )
    op.create_table(
        "kind_rates",
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("next_start_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("kind", name="pk_kind_rates"),
    )


def downgrade() -> None:
    op.drop_table("kind_rates")
    op.drop_index("ix_jobs_key_state", table_name="jobs")
    op.drop_index("ix_jobs_held_kind_priority", table_name="jobs")
    # In place on both databases, as 0015 drops its column: a batch rebuild would drop 0014's triggers.
    op.execute("ALTER TABLE jobs DROP COLUMN held_by")
    op.execute("ALTER TABLE jobs DROP COLUMN concurrency_key")

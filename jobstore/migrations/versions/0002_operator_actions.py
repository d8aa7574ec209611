"""Operator actions: who cancelled, requeued or resolved a job, when, and their note.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "operator_actions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("note", sa.Text()),
        sa.Column("at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_operator_actions_job_id_jobs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_operator_actions"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_operator_actions_job_id_at", "operator_actions", ["job_id", "at"])


def downgrade() -> None:
    op.drop_index("ix_operator_actions_job_id_at", table_name="operator_actions")
    op.drop_table("operator_actions")

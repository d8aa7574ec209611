"""An index for the job retention: finished jobs by state and finish time.

Without it a retention pass reads every job it keeps to find the few past the retention.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_state_finished_at", "jobs", ["state", "finished_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_state_finished_at", table_name="jobs")

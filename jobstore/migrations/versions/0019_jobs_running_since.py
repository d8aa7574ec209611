"""When a running job's attempt began on a worker's thread (`jobs.running_since`): a worker that claims jobs
ahead of its threads holds some claimed but waiting for a thread, and the job view tells those apart from
the jobs that have started. The jobs running when it is added read as started (from their last change: a
few rows, which the running jobs' index finds); every other row keeps it null, so adding the nullable column
rewrites no other row on either database.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("running_since", sa.Float()))
    op.execute("UPDATE jobs SET running_since = updated_at WHERE state = 'running'")


def downgrade() -> None:
    # In place on both databases, as 0015 to 0017 drop their columns.
    op.execute("ALTER TABLE jobs DROP COLUMN running_since")

"""Priorities and fair tenants: the job's priority, and the priority and tenant of each outbox row, which
the relay leases by (priority, then a turn per tenant, then age); indexes for the two ordered walks, and
for telling in two index seeks whether more than one tenant waits (only then is there a turn to rank).

Existing jobs are `normal` (rank 1); existing outbox rows take their job's tenant.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("priority", sa.Integer(), nullable=False, server_default="1"))
    op.add_column("outbox", sa.Column("priority", sa.Integer(), nullable=False, server_default="1"))
    op.add_column("outbox", sa.Column("tenant", sa.String(255), nullable=False, server_default=""))
    op.execute(
        "UPDATE outbox SET tenant = (SELECT jobs.tenant FROM jobs WHERE jobs.id = outbox.job_id)"
        " WHERE EXISTS (SELECT 1 FROM jobs WHERE jobs.id = outbox.job_id)"
    )
    op.create_index("ix_jobs_state_priority_available_at", "jobs", ["state", "priority", "available_at"])
    op.create_index("ix_outbox_published_at_priority_id", "outbox", ["published_at", "priority", "id"])
    op.create_index("ix_jobs_state_tenant", "jobs", ["state", "tenant"])
    op.create_index("ix_outbox_published_at_tenant", "outbox", ["published_at", "tenant"])


def downgrade() -> None:
    op.drop_index("ix_outbox_published_at_tenant", table_name="outbox")
    op.drop_index("ix_jobs_state_tenant", table_name="jobs")
    op.drop_index("ix_outbox_published_at_priority_id", table_name="outbox")
    op.drop_index("ix_jobs_state_priority_available_at", table_name="jobs")
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("tenant")
        batch.drop_column("priority")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("priority")

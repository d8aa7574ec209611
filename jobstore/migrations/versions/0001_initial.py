"""The first released schema: jobs, attempts, outbox.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("tenant", sa.String(255), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("operation_key", sa.String(255), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(255)),
        sa.Column("lease_expires_at", sa.Float()),
        sa.Column("available_at", sa.Float(), nullable=False),
        sa.Column("deadline_at", sa.Float()),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("external_epoch", sa.Integer()),
        sa.Column("checkpoint", sa.Text()),
        sa.Column("checkpoint_epoch", sa.Integer()),
        sa.Column("result_attempt_id", sa.String(36)),
        sa.Column("error_code", sa.String(64)),
        sa.Column("error_message", sa.Text()),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float()),
        sa.Column("finished_at", sa.Float()),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
        sa.UniqueConstraint("tenant", "operation_key", name="uq_jobs_tenant_operation_key"),
    )
    op.create_index("ix_jobs_state_available_at", "jobs", ["state", "available_at"])
    op.create_index("ix_jobs_tenant_created_at", "jobs", ["tenant", "created_at", "id"])
    op.create_index("ix_jobs_state_lease_expires_at", "jobs", ["state", "lease_expires_at"])
    op.create_table(
        "attempts",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(255), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float()),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("external_started_at", sa.Float()),
        sa.Column("output", sa.Text()),
        sa.Column("error_code", sa.String(64)),
        sa.Column("error_message", sa.Text()),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_attempts_job_id_jobs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_attempts"),
        sa.UniqueConstraint("job_id", "epoch", name="uq_attempts_job_id_epoch"),
    )
    op.create_table(
        "outbox",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("available_at", sa.Float(), nullable=False),
        sa.Column("published_at", sa.Float()),
        sa.Column("lease_token", sa.String(36)),
        sa.Column("lease_expires_at", sa.Float()),
        sa.Column("publish_attempts", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_outbox_job_id_jobs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_outbox"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_outbox_published_at_available_at", "outbox", ["published_at", "available_at"])
    op.create_index("ix_outbox_job_id", "outbox", ["job_id"])


def downgrade() -> None:
    op.drop_table("outbox")
    op.drop_table("attempts")
    op.drop_table("jobs")

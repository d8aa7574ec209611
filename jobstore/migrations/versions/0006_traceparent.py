"""A job's trace context: the W3C `traceparent` of the api's accept span, carried to every publish and
attempt of the job (outbox_bridge/telemetry/tracing.py). Null for jobs accepted without tracing and before
this revision.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("traceparent", sa.String(55)))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("traceparent")

"""The relay role: on SQLite one relay at a time publishes the outbox, under a renewed, fenced lease of the
role (`jobstore.relayrole`) rather than a write transaction that leases rows before every publish.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "relay_role",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("token", sa.String(36), nullable=False),
        sa.Column("holder", sa.String(300), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("relay_role")

"""The outbox's row leases are gone: since revision 0009 one relay at a time holds the relay role and
publishes the outbox without leasing rows (`jobstore.relayrole`), and nothing wrote `lease_token` or
`lease_expires_at` any more. Every process of a deployment must run a version of this revision or later:
an earlier relay still names these columns.

Both databases drop a column in place (SQLite since 3.35), without rebuilding the table: neither column is
indexed.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE outbox DROP COLUMN lease_token")
    op.execute("ALTER TABLE outbox DROP COLUMN lease_expires_at")


def downgrade() -> None:
    op.add_column("outbox", sa.Column("lease_token", sa.String(36)))
    op.add_column("outbox", sa.Column("lease_expires_at", sa.Float()))

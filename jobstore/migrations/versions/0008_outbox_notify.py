"""PostgreSQL: the relays' doorbell rung by the store itself. A statement-level trigger on `outbox` sends one
`NOTIFY` per INSERT statement on the channel of the table's schema, carrying the earliest `available_at`
among the rows it added (`drivers.postgresql.listener`); PostgreSQL delivers it when the transaction commits.
Every writer of outbox rows rings the relays this way, without a statement of its own. Nothing on SQLite,
whose relays are rung through Unix sockets after the commit (`jobstore.doorbells`).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# The channel's prefix is `drivers.postgresql.listener.CHANNEL_PREFIX`, written out: a migration does not
# change when the code does.
_FUNCTION = """
CREATE FUNCTION outbox_bridge_ring_relays() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    due double precision;
BEGIN
    SELECT min(available_at) INTO due FROM added;
    IF due IS NOT NULL THEN
        PERFORM pg_notify('outbox_bridge.' || TG_TABLE_SCHEMA, due::text);
    END IF;
    RETURN NULL;
END
$$
"""
_TRIGGER = """
CREATE TRIGGER outbox_ring_relays AFTER INSERT ON outbox
REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION outbox_bridge_ring_relays()
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_FUNCTION)
    op.execute(_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER IF EXISTS outbox_ring_relays ON outbox")
    op.execute("DROP FUNCTION IF EXISTS outbox_bridge_ring_relays()")

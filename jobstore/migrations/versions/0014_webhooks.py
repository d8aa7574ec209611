"""Completion webhooks: the endpoints an operator registers per tenant, the deliveries owed to them and each
attempt at one, and what operators did to them (`jobstore.webhooks`).

A delivery is written by the store itself: a row trigger on `jobs` inserts one pending delivery per endpoint
of the job's tenant whose events name the job's new state, whenever a job moves into a terminal state (and
when a job is inserted in one). Every writer of a job's state (a consumer's fenced commit, the baseline's
workers, the sweeper, an operator) is covered without a statement of its own, and the delivery commits or
rolls back with the transition: a fenced-out UPDATE matches no row and fires nothing.

An endpoint's `events` are its event names joined by commas (`job.succeeded,job.dead`); the trigger matches
`,job.<state>,` within them. The delivery's times are the job's `updated_at`, written by the transition on the
store's clock, so the trigger reads no clock of its own.

SQLite keeps a trigger with its table: a later migration that rebuilds `jobs` there (a batch alteration
copies the table) must create these triggers again; tests/integration/test_webhook_store.py fails without
them.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_TERMINAL = "('succeeded', 'failed', 'dead', 'cancelled', 'unknown')"

_COLUMNS = "id, endpoint_id, tenant, job_id, event, occurred_at, created_at, state, attempts, next_attempt_at"

_SQLITE_INSERT = f"""
    INSERT INTO webhook_deliveries ({_COLUMNS})
    SELECT lower(hex(randomblob(16))), e.id, NEW.tenant, NEW.id, 'job.' || NEW.state,
           NEW.updated_at, NEW.updated_at, 'pending', 0, NEW.updated_at
    FROM webhook_endpoints AS e
    WHERE e.tenant = NEW.tenant AND instr(',' || e.events || ',', ',job.' || NEW.state || ',') > 0;
"""
_SQLITE_TRIGGERS = (
    f"""
CREATE TRIGGER jobs_webhook_deliveries_update AFTER UPDATE OF state ON jobs FOR EACH ROW
WHEN NEW.state <> OLD.state AND NEW.state IN {_TERMINAL}
BEGIN{_SQLITE_INSERT}END
""",
    f"""
CREATE TRIGGER jobs_webhook_deliveries_insert AFTER INSERT ON jobs FOR EACH ROW
WHEN NEW.state IN {_TERMINAL}
BEGIN{_SQLITE_INSERT}END
""",
)

_POSTGRESQL_FUNCTION = f"""
CREATE FUNCTION outbox_bridge_job_webhooks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_deliveries ({_COLUMNS})
    SELECT replace(gen_random_uuid()::text, '-', ''), e.id, NEW.tenant, NEW.id, 'job.' || NEW.state,
           NEW.updated_at, NEW.updated_at, 'pending', 0, NEW.updated_at
    FROM webhook_endpoints AS e
    WHERE e.tenant = NEW.tenant AND strpos(',' || e.events || ',', ',job.' || NEW.state || ',') > 0;
    RETURN NULL;
END
$$
"""
_POSTGRESQL_TRIGGERS = (
    f"""
CREATE TRIGGER jobs_webhook_deliveries_update AFTER UPDATE OF state ON jobs FOR EACH ROW
WHEN (NEW.state IS DISTINCT FROM OLD.state AND NEW.state IN {_TERMINAL})
EXECUTE FUNCTION outbox_bridge_job_webhooks()
""",
    f"""
CREATE TRIGGER jobs_webhook_deliveries_insert AFTER INSERT ON jobs FOR EACH ROW
WHEN (NEW.state IN {_TERMINAL})
EXECUTE FUNCTION outbox_bridge_job_webhooks()
""",
)

_PENDING_ONLY: dict[str, Any] = {
    "postgresql_where": sa.text("state = 'pending'"),
    "sqlite_where": sa.text("state = 'pending'"),
}


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("tenant", sa.String(255), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("events", sa.Text(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("previous_secret", sa.Text()),
        sa.Column("previous_secret_until", sa.Float()),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_endpoints"),
    )
    op.create_index("ix_webhook_endpoints_tenant", "webhook_endpoints", ["tenant"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("endpoint_id", sa.String(36), nullable=False),
        sa.Column("tenant", sa.String(255), nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("occurred_at", sa.Float(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.Float(), nullable=False),
        sa.Column("last_status", sa.Integer()),
        sa.Column("last_error", sa.Text()),
        sa.Column("delivered_at", sa.Float()),
        sa.Column("replayed_at", sa.Float()),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_deliveries"),
        sa.ForeignKeyConstraint(
            ["endpoint_id"],
            ["webhook_endpoints.id"],
            name="fk_webhook_deliveries_endpoint_id_webhook_endpoints",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_webhook_deliveries_job_id_jobs", ondelete="CASCADE"
        ),
    )
    op.create_index(
        "ix_webhook_deliveries_due_next_attempt_at",
        "webhook_deliveries",
        ["next_attempt_at"],
        **_PENDING_ONLY,
    )
    op.create_index(
        "ix_webhook_deliveries_endpoint_id_created_at", "webhook_deliveries", ["endpoint_id", "created_at"]
    )
    op.create_index("ix_webhook_deliveries_job_id", "webhook_deliveries", ["job_id"])
    op.create_table(
        "webhook_attempts",
        sa.Column("delivery_id", sa.String(36), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("status_code", sa.Integer()),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("error", sa.Text()),
        sa.PrimaryKeyConstraint("delivery_id", "attempt", name="pk_webhook_attempts"),
        sa.ForeignKeyConstraint(
            ["delivery_id"],
            ["webhook_deliveries.id"],
            name="fk_webhook_attempts_delivery_id_webhook_deliveries",
            ondelete="CASCADE",
        ),
    )
    op.create_table(
        "webhook_actions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("endpoint_id", sa.String(36), nullable=False),
        sa.Column("delivery_id", sa.String(36)),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_actions"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_webhook_actions_endpoint_id_at", "webhook_actions", ["endpoint_id", "at"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_POSTGRESQL_FUNCTION)
        for trigger in _POSTGRESQL_TRIGGERS:
            op.execute(trigger)
    else:
        for trigger in _SQLITE_TRIGGERS:
            op.execute(trigger)


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    on_jobs = " ON jobs" if postgresql else ""
    op.execute(f"DROP TRIGGER IF EXISTS jobs_webhook_deliveries_update{on_jobs}")
    op.execute(f"DROP TRIGGER IF EXISTS jobs_webhook_deliveries_insert{on_jobs}")
    if postgresql:
        op.execute("DROP FUNCTION IF EXISTS outbox_bridge_job_webhooks()")
    op.drop_table("webhook_actions")
    op.drop_table("webhook_attempts")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_endpoints")

"""Workflows: jobs that wait for other jobs (`job_dependencies`, `job_waits`), and batches whose callback runs
once every member has ended (`batches`, `batch_members`, `batch_callbacks`).

What a job's ending starts is written by the store itself, as its completion webhooks are (migration 0014):
a row trigger on `jobs` runs in the transaction that moves a job into a terminal state, whichever writer
moves it (a consumer's fenced commit, a baseline worker, the sweeper, an operator), and commits or rolls back
with it; a fenced-out UPDATE matches no row and fires nothing. When the job that ended is one others wait for:

- an edge to each of its dependents is resolved once (`job_dependencies.resolved`), so a job that ends,
  is requeued and ends again counts once;
- a dependent that asked to be cancelled when one of its dependencies does not succeed, and still waits,
  ends `cancelled` (`dependency_failed`) in the same transaction; that UPDATE fires this trigger in turn, so
  the ending reaches dependents of dependents (SQLite runs a trigger from its own body only with
  `PRAGMA recursive_triggers`, which the store's connections set);
- a dependent with nothing left to wait for becomes due (`available_at`, which is `WAITING_AT` while it
  waits, so that no claim takes it) and gets its outbox row, once (`job_waits.released`).

When it is a batch's member, the batch's count of unfinished members goes down by one; the transaction that
takes it to zero marks the batch `done` and inserts its callback job (from `batch_callbacks`, the job the
batch's request named, its id chosen at accept) with its outbox row. On PostgreSQL two transactions that end
the batch's last two members at once both UPDATE the batch's row: the second waits for the first's commit
and then sees its count (READ COMMITTED re-reads a row it waited for), so exactly one of them sees zero.
A member requeued while its batch runs counts as unfinished again; once the batch is done it stays done.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

# `available_at` of a job that waits for others: later than any due time, so no read of due jobs sees it.
WAITING_AT = 1e15

_TERMINAL = "('succeeded', 'failed', 'dead', 'cancelled', 'unknown')"

_JOB_COLUMNS = (
    "id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts, "
    "available_at, priority, deadline_at, cancel_requested, created_at, updated_at, traceparent, queue, "
    "snoozes"
)

# The statements both databases run when a job ends (NEW is the job's row), in this order. `:now` stands for
# the job's `updated_at`, written by the transition on the store's clock.
_SQLITE_ENDED = f"""
    UPDATE jobs SET state = 'cancelled', error_code = 'dependency_failed',
        error_message = 'a job it waits for ended ' || NEW.state || ': ' || NEW.id,
        finished_at = NEW.updated_at, updated_at = NEW.updated_at
    WHERE NEW.state <> 'succeeded' AND state = 'queued' AND id IN (
        SELECT d.job_id FROM job_dependencies AS d JOIN job_waits AS w ON w.job_id = d.job_id
        WHERE d.depends_on = NEW.id AND d.resolved = 0 AND w.on_failure = 'cancel' AND w.released = 0);
    UPDATE job_waits SET waiting = waiting - 1
    WHERE job_id IN (SELECT job_id FROM job_dependencies WHERE depends_on = NEW.id AND resolved = 0);
    UPDATE job_dependencies SET resolved = 1 WHERE depends_on = NEW.id AND resolved = 0;
    INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, tenant, priority)
    SELECT j.id, NEW.updated_at, max(coalesce(j.run_at, 0), NEW.updated_at), 0, j.tenant, j.priority
    FROM jobs AS j JOIN job_waits AS w ON w.job_id = j.id
    WHERE w.waiting <= 0 AND w.released = 0 AND j.state = 'queued'
      AND j.id IN (SELECT job_id FROM job_dependencies WHERE depends_on = NEW.id);
    UPDATE jobs SET available_at = max(coalesce(run_at, 0), NEW.updated_at), updated_at = NEW.updated_at
    WHERE state = 'queued' AND id IN (
        SELECT w.job_id FROM job_waits AS w JOIN job_dependencies AS d ON d.job_id = w.job_id
        WHERE d.depends_on = NEW.id AND w.waiting <= 0 AND w.released = 0);
    UPDATE job_waits SET released = 1
    WHERE waiting <= 0 AND released = 0
      AND job_id IN (SELECT job_id FROM job_dependencies WHERE depends_on = NEW.id);
    UPDATE batches SET remaining = remaining - 1
    WHERE state = 'running' AND id = (SELECT batch_id FROM batch_members WHERE job_id = NEW.id);
    INSERT INTO jobs ({_JOB_COLUMNS})
    SELECT c.id, b.tenant, c.owner, c.operation_key, c.fingerprint, c.kind, c.payload, 'queued', 0, 0,
        c.max_attempts, NEW.updated_at, c.priority, NEW.updated_at + c.deadline_seconds, 0, NEW.updated_at,
        NEW.updated_at, c.traceparent, c.queue, 0
    FROM batches AS b JOIN batch_callbacks AS c ON c.batch_id = b.id
    WHERE b.state = 'running' AND b.remaining <= 0
      AND b.id = (SELECT batch_id FROM batch_members WHERE job_id = NEW.id);
    INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, tenant, priority)
    SELECT c.id, NEW.updated_at, NEW.updated_at, 0, b.tenant, c.priority
    FROM batches AS b JOIN batch_callbacks AS c ON c.batch_id = b.id
    WHERE b.state = 'running' AND b.remaining <= 0
      AND b.id = (SELECT batch_id FROM batch_members WHERE job_id = NEW.id);
    UPDATE batches SET state = 'done', done_at = NEW.updated_at,
        callback_job_id = (SELECT id FROM batch_callbacks WHERE batch_id = batches.id)
    WHERE state = 'running' AND remaining <= 0
      AND id = (SELECT batch_id FROM batch_members WHERE job_id = NEW.id);
"""

_SQLITE_TRIGGERS = (
    f"""
CREATE TRIGGER jobs_workflow_ended AFTER UPDATE OF state ON jobs FOR EACH ROW
WHEN NEW.state IN {_TERMINAL} AND OLD.state NOT IN {_TERMINAL}
    AND (EXISTS (SELECT 1 FROM job_dependencies WHERE depends_on = NEW.id)
         OR EXISTS (SELECT 1 FROM batch_members WHERE job_id = NEW.id))
BEGIN{_SQLITE_ENDED}END
""",
    f"""
CREATE TRIGGER jobs_workflow_reopened AFTER UPDATE OF state ON jobs FOR EACH ROW
WHEN OLD.state IN {_TERMINAL} AND NEW.state NOT IN {_TERMINAL}
    AND EXISTS (SELECT 1 FROM batch_members WHERE job_id = NEW.id)
BEGIN
    UPDATE batches SET remaining = remaining + 1
    WHERE state = 'running' AND id = (SELECT batch_id FROM batch_members WHERE job_id = NEW.id);
END
""",
)

_POSTGRESQL_FUNCTIONS = (
    f"""
CREATE FUNCTION outbox_bridge_workflow_ended() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    member_of text;
    left_over integer;
BEGIN
    IF EXISTS (SELECT 1 FROM job_dependencies WHERE depends_on = NEW.id AND NOT resolved) THEN
        -- The dependents' rows in one order, so that two endings that reach the same dependents cannot
        -- deadlock; then the edges, resolved once.
        PERFORM 1 FROM job_waits
        WHERE job_id IN (SELECT job_id FROM job_dependencies WHERE depends_on = NEW.id AND NOT resolved)
        ORDER BY job_id FOR UPDATE;
        IF NEW.state <> 'succeeded' THEN
            UPDATE jobs SET state = 'cancelled', error_code = 'dependency_failed',
                error_message = 'a job it waits for ended ' || NEW.state || ': ' || NEW.id,
                finished_at = NEW.updated_at, updated_at = NEW.updated_at
            WHERE state = 'queued' AND id IN (
                SELECT d.job_id FROM job_dependencies AS d JOIN job_waits AS w ON w.job_id = d.job_id
                WHERE d.depends_on = NEW.id AND NOT d.resolved AND w.on_failure = 'cancel'
                  AND NOT w.released);
        END IF;
        -- A dependent's count reaches zero in one transaction only (its row is locked above), and that one
        -- makes it due; one statement may not write a row twice, so the count and the flag go together.
        WITH edges AS (
            UPDATE job_dependencies SET resolved = true WHERE depends_on = NEW.id AND NOT resolved
            RETURNING job_id
        ), counted AS (
            UPDATE job_waits SET waiting = job_waits.waiting - 1,
                released = job_waits.released OR job_waits.waiting - 1 <= 0
            FROM edges WHERE job_waits.job_id = edges.job_id AND NOT job_waits.released
            RETURNING job_waits.job_id, job_waits.waiting
        ), due AS (
            UPDATE jobs SET available_at = greatest(coalesce(jobs.run_at, 0), NEW.updated_at),
                updated_at = NEW.updated_at
            FROM counted WHERE jobs.id = counted.job_id AND counted.waiting <= 0 AND jobs.state = 'queued'
            RETURNING jobs.id, jobs.tenant, jobs.priority, jobs.available_at
        )
        INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, tenant, priority)
        SELECT due.id, NEW.updated_at, due.available_at, 0, due.tenant, due.priority FROM due;
    END IF;

    SELECT batch_id INTO member_of FROM batch_members WHERE job_id = NEW.id;
    IF member_of IS NOT NULL THEN
        UPDATE batches SET remaining = remaining - 1 WHERE id = member_of AND state = 'running'
        RETURNING remaining INTO left_over;
        IF left_over IS NOT NULL AND left_over <= 0 THEN
            INSERT INTO jobs ({_JOB_COLUMNS})
            SELECT c.id, b.tenant, c.owner, c.operation_key, c.fingerprint, c.kind, c.payload, 'queued', 0,
                0, c.max_attempts, NEW.updated_at, c.priority, NEW.updated_at + c.deadline_seconds, false,
                NEW.updated_at, NEW.updated_at, c.traceparent, c.queue, 0
            FROM batches AS b JOIN batch_callbacks AS c ON c.batch_id = b.id WHERE b.id = member_of;
            INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, tenant, priority)
            SELECT c.id, NEW.updated_at, NEW.updated_at, 0, b.tenant, c.priority
            FROM batches AS b JOIN batch_callbacks AS c ON c.batch_id = b.id WHERE b.id = member_of;
            UPDATE batches SET state = 'done', done_at = NEW.updated_at,
                callback_job_id = (SELECT id FROM batch_callbacks WHERE batch_id = member_of)
            WHERE id = member_of;
        END IF;
    END IF;
    RETURN NULL;
END
$$
""",
    """
CREATE FUNCTION outbox_bridge_workflow_reopened() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE batches SET remaining = remaining + 1
    WHERE state = 'running' AND id = (SELECT batch_id FROM batch_members WHERE job_id = NEW.id);
    RETURN NULL;
END
$$
""",
)
_POSTGRESQL_TRIGGERS = (
    f"""
CREATE TRIGGER jobs_workflow_ended AFTER UPDATE OF state ON jobs FOR EACH ROW
WHEN (NEW.state IN {_TERMINAL} AND OLD.state NOT IN {_TERMINAL})
EXECUTE FUNCTION outbox_bridge_workflow_ended()
""",
    f"""
CREATE TRIGGER jobs_workflow_reopened AFTER UPDATE OF state ON jobs FOR EACH ROW
WHEN (OLD.state IN {_TERMINAL} AND NEW.state NOT IN {_TERMINAL})
EXECUTE FUNCTION outbox_bridge_workflow_reopened()
""",
)


def upgrade() -> None:
    op.create_table(
        "job_dependencies",
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("depends_on", sa.String(36), nullable=False),
        sa.Column("resolved", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_job_dependencies_job_id_jobs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "depends_on", name="pk_job_dependencies"),
    )
    op.create_index("ix_job_dependencies_depends_on", "job_dependencies", ["depends_on"])
    op.create_table(
        "job_waits",
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("waiting", sa.Integer(), nullable=False),
        sa.Column("on_failure", sa.String(16), nullable=False),
        sa.Column("released", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_job_waits_job_id_jobs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", name="pk_job_waits"),
    )
    op.create_table(
        "batches",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("tenant", sa.String(255), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("operation_key", sa.String(255), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("remaining", sa.Integer(), nullable=False),
        sa.Column("callback_job_id", sa.String(36)),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("done_at", sa.Float()),
        sa.PrimaryKeyConstraint("id", name="pk_batches"),
        sa.UniqueConstraint("tenant", "operation_key", name="uq_batches_tenant_operation_key"),
    )
    op.create_index("ix_batches_tenant_created_at", "batches", ["tenant", "created_at", "id"])
    op.create_index("ix_batches_created_at", "batches", ["created_at", "id"])
    op.create_index("ix_batches_callback_job_id", "batches", ["callback_job_id"])
    op.create_index("ix_batches_state_done_at", "batches", ["state", "done_at"])
    op.create_table(
        "batch_members",
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("batch_id", sa.String(36), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_batch_members_job_id_jobs", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["batch_id"], ["batches.id"], name="fk_batch_members_batch_id_batches", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", name="pk_batch_members"),
    )
    op.create_index("ix_batch_members_batch_id", "batch_members", ["batch_id", "position"])
    op.create_table(
        "batch_callbacks",
        sa.Column("batch_id", sa.String(36), nullable=False),
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("operation_key", sa.String(255), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("deadline_seconds", sa.Float()),
        sa.Column("traceparent", sa.String(55)),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.ForeignKeyConstraint(
            ["batch_id"], ["batches.id"], name="fk_batch_callbacks_batch_id_batches", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("batch_id", name="pk_batch_callbacks"),
    )
    if op.get_bind().dialect.name == "postgresql":
        for statement in (*_POSTGRESQL_FUNCTIONS, *_POSTGRESQL_TRIGGERS):
            op.execute(statement)
    else:
        for statement in _SQLITE_TRIGGERS:
            op.execute(statement)


def downgrade() -> None:
    for name in ("jobs_workflow_ended", "jobs_workflow_reopened"):
        on_jobs = " ON jobs" if op.get_bind().dialect.name == "postgresql" else ""
        op.execute(f"DROP TRIGGER IF EXISTS {name}{on_jobs}")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS outbox_bridge_workflow_ended()")
        op.execute("DROP FUNCTION IF EXISTS outbox_bridge_workflow_reopened()")
    for table in ("batch_callbacks", "batch_members", "batches", "job_waits", "job_dependencies"):
        op.drop_table(table)

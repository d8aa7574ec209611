"""The jobs table's state indexes hold the jobs of one state: (available_at), (priority, available_at) and
(tenant) of the queued jobs, (lease_expires_at) and (tenant) of the running ones, and (state, finished_at)
of the finished ones, each a partial index, in place of the five full indexes led by `state` (0001, 0005,
0007).

A job's state changes twice in its life (queued to running, running to finished), and on PostgreSQL an
UPDATE that changes an indexed column writes a new entry into every index of the table, whether or not that
index holds the column: each of the two moves wrote eight index entries. An index of one state takes an
entry only from a row in that state, so a claim now writes five and a completion four, and the indexes of
the queued and running jobs stay as small as the backlog while finished jobs pile up until the retention
deletes them. On SQLite the moves rewrite the entries of the indexes holding `state` only; the partial
indexes skip the other states' entries alike.

A query is served by a partial index only when its own text implies the index's condition, so the store
writes the states it reads as literals, and adds `finished_at IS NOT NULL` to a query of finished states
(`schema.state_in`): every move into a finished state sets `finished_at`, every move out clears it.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def _only(condition: str) -> dict[str, Any]:
    return {"postgresql_where": sa.text(condition), "sqlite_where": sa.text(condition)}


_FULL = (
    ("ix_jobs_state_available_at", ["state", "available_at"]),
    ("ix_jobs_state_lease_expires_at", ["state", "lease_expires_at"]),
    ("ix_jobs_state_finished_at", ["state", "finished_at"]),
    ("ix_jobs_state_priority_available_at", ["state", "priority", "available_at"]),
    ("ix_jobs_state_tenant", ["state", "tenant"]),
)
_PARTIAL = (
    ("ix_jobs_queued_available_at", ["available_at"], "state = 'queued'"),
    ("ix_jobs_queued_priority_available_at", ["priority", "available_at"], "state = 'queued'"),
    ("ix_jobs_queued_tenant", ["tenant"], "state = 'queued'"),
    ("ix_jobs_running_lease_expires_at", ["lease_expires_at"], "state = 'running'"),
    ("ix_jobs_running_tenant", ["tenant"], "state = 'running'"),
    ("ix_jobs_finished_state_finished_at", ["state", "finished_at"], "finished_at IS NOT NULL"),
)


def upgrade() -> None:
    # Every move into a finished state sets `finished_at`; a job that reached one without it is given its
    # last change's time, so that the finished jobs' index holds every finished job.
    op.execute(
        "UPDATE jobs SET finished_at = updated_at WHERE finished_at IS NULL"
        " AND state IN ('succeeded', 'failed', 'dead', 'cancelled', 'unknown')"
    )
    for name, columns, condition in _PARTIAL:
        op.create_index(name, "jobs", columns, **_only(condition))
    for name, _ in _FULL:
        op.drop_index(name, table_name="jobs")


def downgrade() -> None:
    for name, columns in _FULL:
        op.create_index(name, "jobs", columns)
    for name, _, _ in reversed(_PARTIAL):
        op.drop_index(name, table_name="jobs")

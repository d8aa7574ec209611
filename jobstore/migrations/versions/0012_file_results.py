"""File results named under a key of their own: an export's committed output said `path` and `media_type`
at its top level, so any kind's JSON result with a `path` key was taken for a file. Outputs of `export`
attempts written before this revision move those two under `outbox_bridge.file` (`handlers.base.file_of`),
where `JobContext.result_file` now puts them; every other output is left as it is.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

FILE_KEY = "outbox_bridge.file"
_EXPORT_OUTPUTS = sa.text(
    "SELECT a.id, a.output FROM attempts a JOIN jobs j ON j.id = a.job_id "
    "WHERE j.kind = 'export' AND a.output IS NOT NULL"
)
_SET_OUTPUT = sa.text("UPDATE attempts SET output = :output WHERE id = :id")


def _dumps(value: dict[str, object]) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def upgrade() -> None:
    conn = op.get_bind()
    for attempt_id, text in conn.execute(_EXPORT_OUTPUTS).all():
        output = json.loads(text)
        if not isinstance(output, dict) or FILE_KEY in output or not isinstance(output.get("path"), str):
            continue
        named = {"path": output.pop("path"), "media_type": output.pop("media_type", "text/csv")}
        conn.execute(_SET_OUTPUT, {"id": attempt_id, "output": _dumps({**output, FILE_KEY: named})})


def downgrade() -> None:
    conn = op.get_bind()
    for attempt_id, text in conn.execute(_EXPORT_OUTPUTS).all():
        output = json.loads(text)
        named = output.pop(FILE_KEY, None) if isinstance(output, dict) else None
        if isinstance(named, dict):
            conn.execute(_SET_OUTPUT, {"id": attempt_id, "output": _dumps({**named, **output})})

"""Which jobs an operator means: by state, kind, tenant, id prefix and time. The dashboard's listing, the
count a bulk requeue shows first and the requeue itself all build their WHERE clause here, so the count an
operator confirms is taken over exactly the jobs the action moves."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sqlalchemy import ColumnElement, false

from outbox_bridge.jobstore.schema import jobs, state_in
from outbox_bridge.jobstore.states import State

# What a job id (a UUID) can start with, and no more: other text names no job.
_ID_PREFIX = re.compile(r"[0-9a-f-]{1,36}", re.ASCII)


@dataclass(frozen=True)
class JobFilter:
    """Jobs in any of `states` (every state when empty), of `kind`, of `tenant`, whose lease `lease_owner`
    holds, whose id starts with `id_prefix` (any letter case), last changed at or after `since` (epoch
    seconds), among `ids` (every job when empty: the jobs an operator ticked). None matches all."""

    states: frozenset[State] = field(default_factory=frozenset)
    kind: str | None = None
    tenant: str | None = None
    id_prefix: str | None = None
    since: float | None = None
    lease_owner: str | None = None
    ids: frozenset[str] = field(default_factory=frozenset)

    def clauses(self) -> list[ColumnElement[bool]]:
        found: list[ColumnElement[bool]] = []
        if self.states:
            found.append(state_in(self.states))
        if self.kind is not None:
            found.append(jobs.c.kind == self.kind)
        if self.tenant is not None:
            found.append(jobs.c.tenant == self.tenant)
        if self.id_prefix is not None:
            found.append(_id_starts_with(self.id_prefix))
        if self.since is not None:
            found.append(jobs.c.updated_at >= self.since)
        if self.lease_owner is not None:
            found.append(jobs.c.lease_owner == self.lease_owner)
        if self.ids:
            found.append(jobs.c.id.in_(sorted(self.ids)))
        return found


# An id prefix no job id can have: a filter that matches no job, for a filter whose input did not parse.
NOTHING = JobFilter(id_prefix="")


def _id_starts_with(prefix: str) -> ColumnElement[bool]:
    prefix = prefix.lower()
    if _ID_PREFIX.fullmatch(prefix) is None:
        return false()
    return jobs.c.id.startswith(prefix, autoescape=True)

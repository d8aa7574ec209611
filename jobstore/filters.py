"""Which jobs an operator means: by state, kind, tenant, id prefix and time. The dashboard's listing, the
count a bulk requeue shows first and the requeue itself all take their conditions from here, so the count an
operator confirms is taken over exactly the jobs the action moves.

A filter is sent as parameters of one of a few named statements, each written for the index that serves it
(`shape`): a field left out is a NULL parameter that its condition lets through (`:kind IS NULL OR kind =
:kind`). The fields that choose an index are not left to such a condition, which SQLite plans without
looking at the values: the ids ticked (the primary key), the states (the finished jobs' index, or that of
the queued or of the running jobs) and, when none of these does, the tenant (its jobs' index, newest
first)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from outbox_bridge.jobstore import drivers
from outbox_bridge.jobstore.states import TERMINAL, State

# What a job id (a UUID) can start with, and no more: other text names no job.
_ID_PREFIX = re.compile(r"[0-9a-f-]{1,36}", re.ASCII)

# The statements' shapes, by the index each reads (`JobFilter.shape`).
SHAPES = ("ids", "finished", "queued", "running", "of_tenant", "any")


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

    @property
    def matches_nothing(self) -> bool:
        """The filter names no job whatever the store holds: its id prefix is text no job id starts with."""
        return self.id_prefix is not None and _ID_PREFIX.fullmatch(self.id_prefix.lower()) is None

    @property
    def shape(self) -> str:
        """Which statement the filter is sent with: `ids` when it names jobs by id (the primary key),
        `finished` when it names finished states only (their index), `queued` or `running` when it names
        that state alone (its index), `of_tenant` when it names none of these but a tenant (the tenant's
        jobs' index), else `any`."""
        if self.ids:
            return "ids"
        if self.states and self.states <= TERMINAL:
            return "finished"
        if self.states == {State.QUEUED}:
            return "queued"
        if self.states == {State.RUNNING}:
            return "running"
        return "any" if self.tenant is None else "of_tenant"

    def params(self, conn: Connection) -> dict[str, Any]:
        """The filter as the parameters of its statement, for the database `conn` is connected to (a field
        left out is None)."""
        driver = drivers.of(conn)
        return {
            "states": driver.array(sorted(s.value for s in self.states)) if self.states else None,
            "tenant": self.tenant,
            "kind": self.kind,
            # A job id is written in lower case and in letters LIKE needs no escape for (`_ID_PREFIX`).
            "id_prefix": None if self.id_prefix is None else self.id_prefix.lower() + "%",
            "since": self.since,
            "lease_owner": self.lease_owner,
            "ids": driver.array(sorted(self.ids)) if self.ids else None,
        }


# An id prefix no job id can have: a filter that matches no job, for a filter whose input did not parse.
NOTHING = JobFilter(id_prefix="")

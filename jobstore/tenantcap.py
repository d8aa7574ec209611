"""`TENANT_MAX_RUNNING`: at most that many of one tenant's jobs run at once across the deployment (0: no
cap). A claim that would take a tenant past it takes nothing for that job: the job stays queued and comes
back later (the table's claim simply passes it over; a consumer's delivery is acked and the job's outbox
row is written again, due after `RETRY_SECONDS`, in the claim's transaction).

The count is the tenant's `running` jobs, read in the claim's transaction. SQLite has one writer at a time,
so two claims cannot both pass it; on PostgreSQL a claim first takes a transaction-scoped advisory lock on
each tenant it may take a job of (in one order, so two claims never wait on each other in a circle), so
the second of two concurrent claims counts the first one's jobs."""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection

from outbox_bridge.jobstore import db, drivers

# A capped tenant's job a consumer was handed is delivered again this much later.
RETRY_SECONDS = 0.5
# The advisory lock's first key: tenant locks do not collide with any other use of advisory locks.
_LOCK_SPACE = 0x7465

# A store with more tenants than this that have queued jobs, none of them due, counts as one where another
# tenant has work (the walk stops there: each tenant it looks at costs a read of its queued jobs).
MOST_TENANTS_LOOKED_AT = 16


def running(conn: Connection, tenants: Collection[str] | None = None) -> Counter[str]:
    """How many jobs of each of `tenants` (every tenant: None) are `running` now. Reads only running jobs
    (the state index's prefix): a few, whatever the backlog."""
    if tenants is None:
        rows = db.execute(conn, "tenant_running_all")
    elif not tenants:
        return Counter()
    else:
        rows = db.execute(conn, "tenant_running", {"tenants": drivers.of(conn).array(sorted(set(tenants)))})
    return Counter({str(tenant): int(count) for tenant, count in rows})


def at_cap(conn: Connection, cap: int) -> list[str]:
    """The tenants already running `cap` jobs or more (none without a cap)."""
    if cap <= 0:
        return []
    return sorted(tenant for tenant, count in running(conn).items() if count >= cap)


def other_tenant_due(conn: Connection, now: float, known: Collection[str], wanted: int) -> bool:
    """Whether at least `wanted` tenants not among `known` have queued jobs a claim could start at `now`.
    Walks the tenants with queued jobs in name order, a seek each (a tenant of `known` is stepped over
    whatever its backlog), reading for each one only up to its first due job; True, to be safe, past
    `MOST_TENANTS_LOOKED_AT` tenants whose queued jobs are all waiting for a later start."""
    if wanted <= 0:
        return True
    found = looked = 0
    tenant = db.execute(conn, "tenant_first_queued")[0][0]
    while tenant is not None:
        if tenant not in known:
            if db.execute(conn, "tenant_due", {"tenant": tenant, "now": now}):
                found += 1
                if found >= wanted:
                    return True
            else:
                looked += 1
                if looked >= MOST_TENANTS_LOOKED_AT:
                    return True
        tenant = db.execute(conn, "tenant_next_queued", {"after": tenant})[0][0]
    return False


@dataclass(frozen=True)
class Share:
    """One process's own bound (`TENANT_SHARE`, `worker.share`): the jobs it holds claimed, by tenant, and
    the most of one tenant's it may hold."""

    held: Counter[str]
    most: int

    def full(self) -> list[str]:
        """The tenants that hold `most` jobs here already."""
        return sorted(tenant for tenant, count in self.held.items() if count >= self.most)


def lock(conn: Connection, tenants: Iterable[str]) -> None:
    """Wait for and take this transaction's lock on each tenant, in sorted order (where the database needs
    one: SQLite's write transactions run one at a time)."""
    keys = (zlib.crc32(tenant.encode()) - 2**31 for tenant in sorted(set(tenants)))  # stable signed 32-bit
    drivers.of(conn).lock_keys(conn, ((_LOCK_SPACE, key) for key in keys))


def admit(
    candidates: Sequence[tuple[str, str]], running_now: Counter[str], cap: int
) -> tuple[list[str], list[str]]:
    """Split (job id, tenant) candidates, in order, into those the cap admits and those it refuses: a
    tenant gets at most `cap` minus what it runs now."""
    taken: Counter[str] = Counter()
    admitted, refused = [], []
    for job_id, tenant in candidates:
        if cap > 0 and running_now[tenant] + taken[tenant] >= cap:
            refused.append(job_id)
        else:
            taken[tenant] += 1
            admitted.append(job_id)
    return admitted, refused

"""`TENANT_SHARE`: a consumer or worker keeps a thread for other tenants while they have work.

Jobs start in a fair order (by priority, then a turn per tenant), but a job, once started, holds its thread
until it ends: without a bound, one tenant's long jobs that arrive while the others are idle take every
thread, and another tenant's job waits for one of them to end, however short it is itself. So while another
tenant has work, a process holds at most `floor(TENANT_SHARE * concurrency)` (at least one) claimed,
unfinished jobs of any one tenant, those claimed ahead of a free thread (`worker.budget`) included, whatever
the jobs' past run times said: the threads past that wait for another tenant's job.

Another tenant has work when this process holds one of its deliveries, when the store holds jobs of it that
are due to start, or when one of its jobs came to this process within the last `ACTIVE_SECONDS`: a tenant
that submits a job every moment has work due only for the moment each one waits, and a thread taken by a
long job in between would keep its next job waiting for as long as that job runs. A tenant alone (no other
tenant's job due or seen lately) gets every thread, and claims ahead as its job lengths allow.

The store is asked only when the bound could hold a tenant back in this round (some tenant could pass its
most), in the round's own transaction: a seek of the queued jobs' tenant index per tenant it steps over
(`tenantcap.other_tenant_due`). When the bound starts to apply while a tenant holds more claimed jobs than
its most that still wait for a thread, the writer gives the excess back (`Runners.give_back_over`).

The rule is each process's own: it takes no lock in the store (`TENANT_MAX_RUNNING` is the
deployment-wide cap that does, `jobstore.tenantcap`). A consumer keeps the deliveries it passes over
waiting, unacked, for a later round; a worker leaves the jobs queued."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable

from sqlalchemy import Connection

from outbox_bridge.core import clock
from outbox_bridge.jobstore import tenantcap

# How long a tenant whose job came to this process counts as having work (seconds).
ACTIVE_SECONDS = 2.0
# How long the store's answer that no other tenant has due jobs stands (seconds).
RECHECK_SECONDS = 0.05


class TenantShare:
    """The share rule of one process of `concurrency` threads. Used by one thread (the store writer)."""

    def __init__(self, share: float, concurrency: int) -> None:
        self.most = max(1, int(share * concurrency))
        self._applies = self.most < concurrency
        self._seen: dict[str, float] = {}  # tenant: when one of its jobs last came here (`clock.now`)
        self._alone: frozenset[str] | None = None  # the `known` of the store's last "no other tenant due"
        self._alone_until = 0.0  # (monotonic) until when that answer stands

    def saw(self, tenants: Iterable[str]) -> None:
        """Jobs of `tenants` came to this process (delivered, or claimed from the table) just now."""
        now = clock.now()
        for tenant in tenants:
            self._seen[tenant] = now

    def active(self) -> set[str]:
        """The tenants whose jobs came here within `ACTIVE_SECONDS`."""
        since = clock.now() - ACTIVE_SECONDS
        for tenant in [t for t, at in self._seen.items() if at < since]:
            del self._seen[tenant]
        return set(self._seen)

    def could_bind(self, held: Counter[str], waiting: Counter[str], room: int, table: bool) -> bool:
        """Whether a round that may claim `room` more jobs (the `waiting` deliveries, by tenant, and with
        `table` any due job of the table) could take some tenant past its most, given what the process
        holds claimed (`held`, by tenant)."""
        if not self._applies or room <= 0:
            return False
        if table and max(held.values(), default=0) + room > self.most:
            return True
        return any(held[tenant] + min(room, count) > self.most for tenant, count in waiting.items())

    def bound(
        self, conn: Connection, held: Counter[str], waiting: Counter[str], room: int, table: bool
    ) -> tenantcap.Share | None:
        """The bound of this round (`could_bind`'s arguments): what the process holds by tenant and the
        most it may hold of one, or None when no bound applies now (it could hold no tenant back, no two
        tenants have work, or the share leaves no thread apart). Asks the store in the caller's
        transaction only when the deliveries and recent jobs do not already show two tenants with work."""
        if not self.could_bind(held, waiting, room, table):
            return None
        known = self.known(waiting)
        # A claim from the table may take a tenant `known` leaves out: the store is asked afresh for it.
        several = len(known) >= 2 or self.others_due(conn, known, fresh=table)
        return tenantcap.Share(held, self.most) if several else None

    def known(self, waiting: Counter[str]) -> set[str]:
        """The tenants known here to have work: those of the held deliveries (`waiting`, by tenant) and
        those whose jobs came lately (`active`)."""
        return {tenant for tenant, count in waiting.items() if count} | self.active()

    def others_due(self, conn: Connection, known: set[str], fresh: bool = False) -> bool:
        """Whether the store holds due jobs of enough tenants beside `known` that two tenants have work. A
        "no" is taken again for `RECHECK_SECONDS` without asking (for the same `known`, unless `fresh`): a
        store's other tenants matter within moments, and a burst of one tenant's short jobs asks at every
        round."""
        if len(known) >= 2:
            return True
        if not fresh and self.alone(known):
            return False
        due = tenantcap.other_tenant_due(conn, clock.now(), known, 2 - len(known))
        if not due:
            self._alone, self._alone_until = frozenset(known), time.monotonic() + RECHECK_SECONDS
        return due

    def alone(self, known: set[str]) -> bool:
        """Whether the store said no more than a moment ago that no tenant beside `known` has due jobs
        (`others_due`): a caller may skip opening a transaction to ask."""
        return self._alone == frozenset(known) and time.monotonic() < self._alone_until

    def over(self, held: Counter[str]) -> bool:
        """Whether some tenant holds more than its most."""
        return any(count > self.most for count in held.values())

"""`TENANT_SHARE`: a consumer or worker keeps a thread for other tenants while jobs run long.

Jobs start in a fair order (by priority, then a turn per tenant), but a job, once started, holds its thread
until it ends: without a bound, one tenant's long jobs that arrive while the others are idle take every
thread, and another tenant's job waits for one of them to end, however short it is itself. So while the jobs
a process runs are not short (it is not claiming ahead, `worker.budget`) and the store holds jobs of more
than one tenant, the process holds at most `floor(TENANT_SHARE * concurrency)` (at least one) claimed jobs of
any one tenant: the threads past that wait for another tenant's job. Short jobs need no such room (a thread
frees within milliseconds), and a deployment with one tenant loses nothing.

The rule is each process's own: it reads no count and takes no lock in the store (`TENANT_MAX_RUNNING` is
the deployment-wide cap that does, `jobstore.tenantcap`). A consumer keeps the deliveries it passes over
waiting, unacked, for its next round; a worker leaves the jobs queued."""

from __future__ import annotations

from collections import Counter

from sqlalchemy import Connection

from outbox_bridge.jobstore import tenantcap


class TenantShare:
    """The share rule of one process of `concurrency` threads. Used by one thread (the one that claims)."""

    def __init__(self, share: float, concurrency: int) -> None:
        self.most = max(1, int(share * concurrency))
        self._applies = self.most < concurrency
        self._several = False  # once the store holds several tenants' jobs, the process counts on it

    def held(self, conn: Connection, held: Counter[str], bursting: bool) -> tenantcap.Share | None:
        """What the process holds by tenant (`held`: its claimed jobs' tenants) and the most it may hold of
        one, or None when no bound applies now (jobs are short, the store holds one tenant's jobs, or the
        share leaves no thread apart). Asks the store in the caller's transaction (two index seeks) until
        it holds jobs of two tenants."""
        if not self._applies or bursting:
            return None
        self._several = self._several or tenantcap.several_tenants(conn)
        if not self._several:
            return None
        return tenantcap.Share(held, self.most)

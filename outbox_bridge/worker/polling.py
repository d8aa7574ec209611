"""Claiming from the jobs table: the polling baseline's path, and the consumer's while the broker is down
(degraded mode). Each claims within `TENANT_MAX_RUNNING` (`tenant_cap`), the claiming process's
`TENANT_SHARE` (`share`) and the deployment's flow limits (`limits`)."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import Connection

from outbox_bridge.core import clock
from outbox_bridge.jobstore import claiming
from outbox_bridge.jobstore.limits import NONE, Limits
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.tenantcap import Share


def claim_due(
    conn: Connection,
    worker: str,
    lease_seconds: float,
    limit: int,
    tenant_cap: int = 0,
    share: Share | None = None,
    limits: Limits = NONE,
) -> list[Claim]:
    """`claiming.claim_due` at the time the transaction runs."""
    return claiming.claim_due(
        conn, worker, clock.now(), lease_seconds, limit, tenant_cap=tenant_cap, share=share, limits=limits
    )


def any_due(
    conn: Connection,
    tenant_cap: int = 0,
    share: Share | None = None,
    limits: Limits = NONE,
    queues: Collection[str] | None = None,
) -> bool:
    """`claiming.any_due` at the time the transaction runs."""
    return claiming.any_due(
        conn, clock.now(), tenant_cap=tenant_cap, share=share, limits=limits, queues=queues
    )

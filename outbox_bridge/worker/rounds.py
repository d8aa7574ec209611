"""What one round of a process's store writer (`worker.writer`) writes, in one transaction: the outcomes
that finished, each under its own fence (`commit_all`, the completer's part), then the claims of the
deliveries it takes (`claim_all`, in the order of `take_in_order`: the producer's part)."""

from __future__ import annotations

import collections
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy import Connection

from outbox_bridge.core import clock
from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.settings import MAX_SNOOZES
from outbox_bridge.jobstore import claiming
from outbox_bridge.jobstore.limits import NONE, Limits
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.states import State
from outbox_bridge.jobstore.tenantcap import Share
from outbox_bridge.worker.commit import commit_outcomes
from outbox_bridge.worker.runners import Finished, Running


class BrokerDelivery(Protocol):
    """A broker delivery as the writer sees it (`consumer.link.Delivery`): the job it names, and what held
    deliveries are ordered by."""

    @property
    def job_id(self) -> str: ...

    @property
    def priority(self) -> int: ...

    @property
    def tenant(self) -> str: ...

    @property
    def traceparent(self) -> str | None: ...


@dataclass
class Claims:
    """The claiming side's part of a round (`worker.producer`): the deliveries it claims, and with
    `from_table` up to `table_room` due jobs from the jobs table, within the process's `TENANT_SHARE`
    (`share`); and the jobs claimed ahead that a thread now runs, to be shown started (`marks`)."""

    deliveries: list[BrokerDelivery] = field(default_factory=list)
    from_table: bool = False
    table_room: int = 0
    share: Share | None = None
    held_back: bool = False  # the share let it take none of the deliveries waiting
    free: int | None = None  # threads free for what it claims; None: as many as it claims
    marks: list[Running] = field(default_factory=list)  # jobs claimed ahead that a thread now runs
    table_ahead: bool = False  # its claim from the table was of jobs ahead of a free thread


# What a round's claims got (`Producer.claim`): a result per delivery, and the jobs claimed from the table.
Claimed = tuple[list[claiming.ClaimResult], list[Claim]]


@dataclass
class Round:
    """What one round writes in its one transaction: the outcomes that finished (the completing side,
    `worker.completer`), then its `claims` (the claiming side). `topped_up` once it has taken what arrived
    while it waited for the write lock (a rerun of its transaction writes the same round)."""

    finished: list[Finished] = field(default_factory=list)
    claims: Claims = field(default_factory=Claims)
    topped_up: bool = False

    @property
    def size(self) -> int:
        return len(self.finished) + len(self.claims.deliveries)


def claim_all(
    conn: Connection,
    job_ids: Sequence[str],
    worker: str,
    lease_seconds: float,
    tenant_cap: int = 0,
    limits: Limits = NONE,
    free: int | None = None,
    queues: Collection[str] | None = None,
) -> list[claiming.ClaimResult]:
    """Claim each job in the caller's transaction (of the named `queues` only, when given); a second
    delivery of one job sees it leased. They are recorded as started when `free` threads (None: as many as
    there are jobs) take them all, else all as claimed ahead of a thread (one claim either way: those a
    free thread takes at once read as started once it has run them a moment, `claiming.mark_running`)."""
    now = clock.now()
    ahead = free is not None and free < len(job_ids)
    return claiming.claim_many(
        conn, job_ids, worker, now, lease_seconds, tenant_cap=tenant_cap, limits=limits, ahead=ahead,
        queues=queues,
    )  # fmt: skip


def commit_all(
    conn: Connection,
    finished: Sequence[Finished],
    backoff: Backoff,
    limits: Limits = NONE,
    *,
    max_snoozes: int = MAX_SNOOZES,
) -> list[State | None]:
    """Commit every finished outcome (`worker.commit.commit_outcomes`), in the caller's transaction: a
    fenced one writes nothing (None) and does not disturb the others."""
    outcomes = [(f.running.claim, f.outcome) for f in finished]
    return commit_outcomes(conn, outcomes, clock.now(), backoff, limits, max_snoozes=max_snoozes)


def take_in_order(
    waiting: collections.deque[BrokerDelivery], count: int, running: Counter[str], most: int | None = None
) -> list[BrokerDelivery]:
    """Take `count` of the held deliveries, in the order the store hands out work: priority first, then
    turns across tenants (a delivery's turn is its rank among its tenant's held deliveries of that priority
    plus the jobs its tenant runs here), then arrival. The rest stay, in arrival order. While everything
    held is of one priority and one tenant, that is arrival order.

    With `most` (`TENANT_SHARE`, `worker.share`), no tenant is taken past `most` jobs running here: its
    other deliveries stay."""
    if most is None and (count >= len(waiting) or len({(d.priority, d.tenant) for d in waiting}) == 1):
        return [waiting.popleft() for _ in range(min(count, len(waiting)))]
    seen: Counter[tuple[int, str]] = Counter()
    keyed = []
    for index, delivery in enumerate(waiting):
        seen[(delivery.priority, delivery.tenant)] += 1
        turn = seen[(delivery.priority, delivery.tenant)] + running[delivery.tenant]
        keyed.append(((delivery.priority, turn, index), delivery))
    first: list[tuple[tuple[int, int, int], BrokerDelivery]] = []
    taken: Counter[str] = Counter()
    for key, delivery in sorted(keyed, key=lambda pair: pair[0]):
        if len(first) == count:
            break
        if most is None or running[delivery.tenant] + taken[delivery.tenant] < most:
            taken[delivery.tenant] += 1
            first.append((key, delivery))
    chosen = {key[2] for key, _ in first}
    kept = [delivery for index, delivery in enumerate(waiting) if index not in chosen]
    waiting.clear()
    waiting.extend(kept)
    return [delivery for _, delivery in first]

"""Giving back to the store, while a process runs, the jobs it claimed that still wait for a thread: when
claiming ahead stops (a job runs long, `worker.budget`) and when `TENANT_SHARE` starts to apply
(`worker.share`). Each goes back queued (`Runners.give_back_waiting`, `Runners.give_back_over`), so a process
with a thread free runs it; its delivery waits with the producer's others, claimed again here in its order
if no other process got to it first, else refused and acked."""

from __future__ import annotations

import collections
from collections import Counter
from typing import Any

from sqlalchemy import Engine

from outbox_bridge.jobstore import db
from outbox_bridge.worker.counts import WriterCounts
from outbox_bridge.worker.runners import Runners, Running
from outbox_bridge.worker.share import TenantShare


def after_claiming_ahead(runners: Runners, waiting: collections.deque[Any], counts: WriterCounts) -> None:
    """Claiming ahead stopped: give back the jobs claimed here that wait for a thread (their deliveries
    join `waiting`). Only where order matters or the table holds it: when this process holds deliveries
    alone, all of one priority and one tenant, no job waits behind another's, and giving back would only
    claim the same jobs again."""
    if not _several_orders(runners, waiting):
        runners.give_back_due = False
        return
    _requeue(runners.give_back_waiting(), waiting, counts)


def over_share(
    engine: Engine,
    runners: Runners,
    share: TenantShare,
    waiting: collections.deque[Any],
    counts: WriterCounts,
) -> None:
    """While another tenant has work, give back the jobs a tenant holds claimed here past its most that
    still wait for a thread, so that the threads they would take next go to the other tenant's jobs. Looks
    at the store (a read) only while a tenant holds jobs past its most that wait."""
    most = share.most
    if not runners.waiting_over(most):
        return
    known = share.known(Counter(delivery.tenant for delivery in waiting))
    if len(known) < 2:
        if share.alone(known):
            return
        try:
            if not db.read(engine, share.others_due, known):
                return
        except db.StoreUnavailable:
            return  # the round that follows finds out, and the next look tries again
    _requeue(runners.give_back_over(most), waiting, counts)


def _requeue(released: list[Running], waiting: collections.deque[Any], counts: WriterCounts) -> None:
    """The deliveries of the jobs given back wait to be claimed again."""
    waiting.extend(running.delivery for running in released if running.delivery is not None)
    counts.add(shed=len(released))


def _several_orders(runners: Runners, waiting: collections.deque[Any]) -> bool:
    claimed = runners.claimed()
    if any(running.delivery is None for running in claimed):
        return True  # claimed from the table: any process with a thread free claims it there, in order
    held = [*waiting, *(running.delivery for running in claimed)]
    return len({(delivery.priority, delivery.tenant) for delivery in held}) > 1

"""The relay's side of the store: read due outbox rows under the relay role, and write what the broker said
about them.

Confirms are grouped: every confirmation that arrived while the previous write was running goes into the
next `PublishResults`, written in one transaction, so the relay writes once per group rather than once per
message. The holder of the relay role takes no lease on rows (`read_due`, `jobstore.leader`): the
results are its only writes."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, leader
from outbox_bridge.jobstore.outbox import Lease
from outbox_bridge.relay.window import Sent

# A nacked or returned row waits this long before it is read again.
REFUSED_RETRY_SECONDS = 1.0


def _add(bucket: dict[str, list[int]], sent: Iterable[Sent]) -> None:
    for item in sent:
        bucket.setdefault(item.token, []).append(item.outbox_id)


def _count(bucket: dict[str, list[int]]) -> int:
    return sum(len(ids) for ids in bucket.values())


@dataclass
class PublishResults:
    """What the broker said about rows read under the relay role, by the role's token: confirmed ones to
    mark published, refused ones (nacked, returned) to hold back a little, unsent ones (never confirmed, or
    read after the channel was gone) that need no write: they are still due."""

    confirmed: dict[str, list[int]] = field(default_factory=dict)
    refused: dict[str, list[int]] = field(default_factory=dict)
    unsent: dict[str, list[int]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.confirmed or self.refused or self.unsent)

    def add_confirmed(self, sent: Iterable[Sent]) -> None:
        _add(self.confirmed, sent)

    def add_refused(self, sent: Iterable[Sent]) -> None:
        _add(self.refused, sent)

    def add_unsent(self, sent: Iterable[Sent]) -> None:
        _add(self.unsent, sent)

    def merge(self, other: PublishResults) -> None:
        for mine, theirs in (
            (self.confirmed, other.confirmed),
            (self.refused, other.refused),
            (self.unsent, other.unsent),
        ):
            for token, ids in theirs.items():
                mine.setdefault(token, []).extend(ids)

    @property
    def confirmed_count(self) -> int:
        return _count(self.confirmed)

    @property
    def released_count(self) -> int:
        return _count(self.refused) + _count(self.unsent)


@dataclass(frozen=True)
class WrittenBack:
    """What one write of results changed. `stale` confirmed rows were no longer ours to mark (the relay role
    had passed on), so another relay publishes or has published them."""

    marked: int
    stale: int
    released: int


def settle(conn: Connection, batch: PublishResults, *, now: float) -> WrittenBack:
    """Write what the broker said, in the caller's transaction, while each row's token holds the relay
    role: confirmed rows are marked published and refused ones held back; unsent ones need no write (they
    are still due). A relay whose role has passed on writes nothing."""
    marked = sum(leader.mark_published(conn, token, ids, now) for token, ids in batch.confirmed.items())
    retry_at = now + REFUSED_RETRY_SECONDS
    released = sum(
        leader.hold_back(conn, token, ids, now=now, retry_at=retry_at) for token, ids in batch.refused.items()
    )
    released += _count(batch.unsent)
    return WrittenBack(marked=marked, stale=batch.confirmed_count - marked, released=released)


@dataclass(frozen=True)
class Leased:
    """What one read did: the rows it read (None when a first look found nothing due), and, when
    it found fewer rows than asked, when the next row not yet due comes due (None: no such row)."""

    lease: Lease | None
    next_due: float | None = None


def write_results(engine: Engine, batch: PublishResults, *, now: float) -> WrittenBack:
    """`settle` under the relay role in a transaction of its own; of one statement, committing by itself on
    PostgreSQL, when the batch holds one kind of confirmation under one token (the usual batch: confirms). A
    batch of unsent rows only takes no transaction (they are still due)."""
    if not batch.confirmed and not batch.refused:
        return WrittenBack(marked=0, stale=0, released=_count(batch.unsent))
    one = len(batch.confirmed) + len(batch.refused) == 1
    return (db.transact_one if one else db.transact)(engine, settle, batch, now=now)


def read_due(
    engine: Engine, settings: Settings, limit: int, token: str, exclude: Collection[int], *, idle: bool
) -> Leased:
    """The relay role's lease: a read of up to `limit` due rows, leaving out `exclude` (`leader.read`)."""
    lease, next_due = leader.read(
        engine, token, now=clock.now(), limit=limit, exclude=exclude, tenant_cap=settings.tenant_max_running,
        idle=idle,
    )  # fmt: skip
    return Leased(lease, next_due)

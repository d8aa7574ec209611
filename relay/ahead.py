"""How far ahead of the consumers the relay publishes: at most `PUBLISH_AHEAD` messages waiting (ready, not
yet delivered) in the queue. What is due beyond that waits in the outbox, where each lease takes it in the
store's order (priority, then a turn per tenant, then age: `jobstore.outbox.lease_order`), so a `high` job
or another tenant's job waits behind at most this many messages and the consumers' prefetch, not behind the
whole backlog. The queue has one order (a quorum queue has no priorities): the outbox is the priority queue.

The count is read with a passive declare of the queue on the relay's channel, only while the relay is held
back (never once per message): between readings it grows by what the relay publishes, so it can only
overestimate, and a reading is taken again every `HELD_POLL_SECONDS` until there is room."""

from __future__ import annotations

# While held back, the queue's depth is read this often (one small round trip on the relay's channel).
HELD_POLL_SECONDS = 0.02


class PublishAhead:
    """The relay's count of the messages waiting in the queue. Only the IOLoop's thread touches it."""

    def __init__(self, cap: int, batch: int) -> None:
        self.cap = cap  # 0: no bound
        # Lease again once this much room opened: not one message at a time.
        self.refill = max(1, min(batch, cap) // 2) if cap else 1
        self._batch = batch
        self._waiting: int | None = None  # None: not read since the link came up
        self._since_reading = 0
        self.reading = False

    @property
    def known(self) -> bool:
        return self._waiting is not None

    def room(self) -> int | None:
        """How many more messages may be published now: None while held back (nothing known, or less room
        than `refill`); `read` again, and lease when there is room."""
        if not self.cap:
            return self._batch
        if self._waiting is None:
            return None
        room = self.cap - self._waiting
        return room if room >= self.refill else None

    def published(self, count: int) -> None:
        if self._waiting is not None:
            self._waiting += count
        self._since_reading += count

    def begin_reading(self) -> None:
        self.reading = True
        self._since_reading = 0

    def read(self, ready: int) -> None:
        """The broker's count of ready messages, as of the reading begun last; what was published since
        counts on top (it may or may not be in the broker's count: overestimating only holds back longer)."""
        self._waiting = ready + self._since_reading
        self.reading = False

    def forget(self) -> None:
        """The link went down: the next link reads the queue before it publishes."""
        self._waiting = None
        self.reading = False

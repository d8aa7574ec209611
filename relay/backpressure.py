"""How far ahead of the consumers the relay publishes: at most `PUBLISH_AHEAD` messages waiting (ready, not
yet delivered) in the queue, and, once the relay has seen how fast the consumers take them, no more than
about `AHEAD_SECONDS` of their work. What is due beyond that waits in the outbox, where each lease takes it
in the store's order (priority, then a turn per tenant, then age: `jobstore.outbox.due_order`), so a
`high` job or another tenant's job waits behind at most that window and the consumers' prefetch, not behind
the whole backlog. The queue has one order (a quorum queue has no priorities): the outbox is the priority
queue.

The count is read with a passive declare of the queue on the relay's channel, only while the relay is held
back (never once per message): between readings it grows by what the relay publishes, so it can only
overestimate; a relay held back reads at once, then every `HELD_POLL_SECONDS` until there is room. Two
readings in a row also say how many messages the consumers took in between: the consumers' rate.

What the consumers take is not always what they run: a consumer also fills its prefetch (dozens of
deliveries), so right after a quiet spell the queue runs dry once however slow the jobs are. Read as a rate,
that one reading would open the window to the cap, and a job of another tenant would wait behind seconds of
work. So a rate is forgotten once it is `RATE_GAP_SECONDS` old (the next busy spell starts again from
`START`); a rate is measured only between two readings that both found messages ready (the consumers'
prefetch was full, so what they took is what they finished), and a first measurement lowers a guess at once
but raises it at most twofold every `AHEAD_SECONDS`; and a dry queue raises the limit only once it has
been dry at every reading for `AHEAD_SECONDS`, with messages published in between, then at every dry
reading while it stays so: consumers that keep running out of work, not a prefetch filling up (which takes a
few tens of milliseconds)."""

from __future__ import annotations

import time

# While held back, the queue's depth is read this often (one small round trip on the relay's channel).
HELD_POLL_SECONDS = 0.02
# Keep about this much of the consumers' work waiting in the queue (but never fewer than `FLOOR` messages):
# enough that they never wait for the relay, little enough that a new job waits behind little.
AHEAD_SECONDS = 0.25
FLOOR = 20
# Before the rate is known (a relay just connected): this many at most; a queue that runs dry doubles it.
START = 100
# Readings further apart than this say nothing about the current rate.
RATE_GAP_SECONDS = 1.0
SMOOTHING = 0.3


class Backpressure:
    """The relay's count of the messages waiting in the queue. Only the IOLoop's thread touches it."""

    def __init__(self, cap: int, batch: int) -> None:
        self.cap = cap  # 0: no bound
        self._batch = batch
        self._waiting: int | None = None  # None: not read since the link came up
        self._since_reading = 0
        self._read_at = 0.0
        self._rate: float | None = None  # messages the consumers take per second, smoothed
        self._dry_since: float | None = None  # since when every reading found what was published taken
        self._ready_before = 0  # what the last reading found ready
        self._measured = False  # the rate is a measurement (not a guess raised by a dry queue)
        self.reading = False

    @property
    def known(self) -> bool:
        return self._waiting is not None

    @property
    def limit(self) -> int:
        """How many messages may wait in the queue now: `START` (at most the cap) until the rate is known,
        then about `AHEAD_SECONDS` of it, within `FLOOR` and the cap. A rate last read `RATE_GAP_SECONDS`
        ago is no longer known."""
        if self._rate is None or time.monotonic() - self._read_at >= RATE_GAP_SECONDS:
            return min(self.cap, START)
        return max(min(FLOOR, self.cap), min(self.cap, int(self._rate * AHEAD_SECONDS)))

    def reading_delay(self) -> float:
        """How long to wait before reading the queue again: at once when the last reading is older than
        `HELD_POLL_SECONDS` (the count only grew since: at a steady load it is stale, not full), else the
        rest of that poll."""
        if self._waiting is None:
            return 0.0
        return max(0.0, HELD_POLL_SECONDS - (time.monotonic() - self._read_at))

    def room(self) -> int | None:
        """How many more messages may be published now: None while held back (nothing known, or less room
        than half the limit: not one message at a time); `read` again, and lease when there is room."""
        if not self.cap:
            return self._batch
        if self._waiting is None:
            return None
        limit = self.limit
        room = limit - self._waiting
        return room if room >= max(1, limit // 2) else None

    def published(self, count: int) -> None:
        if self._waiting is not None:
            self._waiting += count
        self._since_reading += count

    def begin_reading(self, unconfirmed: int = 0) -> None:
        """A reading is asked for now, with `unconfirmed` messages published and not yet confirmed: the
        broker's count may leave them out, so they count on top of it."""
        self.reading = True
        self._since_reading = unconfirmed

    def read(self, ready: int) -> None:
        """The broker's count of ready messages, as of the reading begun last; what was unconfirmed then or
        published since counts on top (it may or may not be in the broker's count: overestimating only
        holds back until the next reading)."""
        now = time.monotonic()
        before, gap = self._waiting, now - self._read_at
        self._waiting = ready + self._since_reading
        recent = before is not None and 0 < gap < RATE_GAP_SECONDS
        if not recent:
            # A quiet spell: what the consumers took before says nothing of now.
            self._rate, self._dry_since, self._measured = None, None, False
        if ready == 0:
            emptied = recent and bool(before)  # messages were there (or published since) and all were taken
            if not emptied:
                self._dry_since = None
            elif self._dry_since is None:
                self._dry_since = now
            elif now - self._dry_since >= AHEAD_SECONDS:
                # Dry all along: the consumers take all there is and might take more. What they took is no
                # measure of what they can take; ask for more ahead.
                floor = self.limit / AHEAD_SECONDS
                self._rate = min(2 * max(self._rate or 0.0, floor), self.cap / AHEAD_SECONDS)
                self._measured = False  # and it doubles again at the next dry reading
        else:
            self._dry_since = None
            if recent and self._ready_before > 0:
                assert before is not None
                taken = max(0, before - self._waiting) / gap
                last = self._rate if self._rate is not None else self.limit / AHEAD_SECONDS
                # At most doubling every AHEAD_SECONDS: a consumer that gives jobs back (`worker.writer`)
                # or reconnects takes a burst of deliveries that is no rate.
                taken = min(taken, last * 2 ** (gap / AHEAD_SECONDS))
                if self._measured or taken > last:
                    self._rate = last + SMOOTHING * (taken - last)
                else:  # a guess gives way at once to a lower measurement
                    self._rate = taken
                self._measured = True
        self._ready_before = ready
        self._read_at = now
        self.reading = False

    def forget(self) -> None:
        """The link went down: the next link reads the queue before it publishes."""
        self._waiting = None
        self._rate = None
        self._dry_since, self._measured = None, False
        self._ready_before = 0
        self.reading = False

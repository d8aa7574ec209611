"""Which relay leads: one relay at a time holds the relay role (`jobstore.leader`) and is the leader; it
alone publishes the outbox, fires the schedules and sends the webhooks. The others stand by and take the role
when its holder stops, dies or lets it expire.

The role is held `LEADER_SECONDS` from each renewal; its holder looks every `TEND_SECONDS` and renews once
less than `RENEW_SECONDS` is left (a standby looks as often, with a read, and takes the role at once when its
holder is gone: `jobstore.leader.LeaderClaim`); nothing is done as the leader in its last `MARGIN_SECONDS`.
Only a relay whose broker connection is up and confirming may lead: one that cannot hands the role back for
a standby to take."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from sqlalchemy import Engine

from outbox_bridge.core import clock
from outbox_bridge.jobstore import leader as store_leader
from outbox_bridge.relay.loop import RelayLoop

log = logging.getLogger("relay")

LEADER_SECONDS = 5.0
TEND_SECONDS = 0.1
RENEW_SECONDS = 3.0
MARGIN_SECONDS = 1.0


class Leadership:
    """This relay's claim on the relay role, tended on the loop. `trouble()` says why the relay may not lead
    now (None: it may); `elected()` runs on the loop when the relay becomes the leader, or leads again after
    its role had run out. `is_leader()` may be asked from any thread."""

    def __init__(
        self,
        engine: Engine,
        loop: RelayLoop,
        *,
        trouble: Callable[[], str | None],
        elected: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._claim = store_leader.LeaderClaim(engine, LEADER_SECONDS)
        self._trouble = trouble
        self._elected = elected
        # The token the role is held under, and until when (store clock).
        self.token: str | None = None
        self._until = 0.0

    def start(self) -> None:
        self._loop.ioloop.add_callback_threadsafe(self.tend)
        self._loop.every(TEND_SECONDS, self.tend)

    def stop(self) -> None:
        """Once the loop has ended: hand the role back, so a standby takes it at its next look, and end the
        claim's connection."""
        token, self.token = self.token, None
        if token is not None:
            self._release(token)
        self._claim.close()

    def is_leader(self) -> bool:
        return self.token is not None and clock.now() < self._until - MARGIN_SECONDS

    def tend(self) -> None:
        """Renew the role, or, standing by, take it if its holder let it expire or is gone. A relay with
        `trouble()` hands the role back instead (a connection lost, or confirms that stopped coming for as
        long as a row lease would last)."""
        if self._loop.stopping or "role" in self._loop.busy:
            return
        trouble = self._trouble()
        if trouble is not None:
            if self.token is not None:
                log.warning("handing back the relay role: %s", trouble)
                token, self.token, self._until = self.token, None, 0.0
                self._loop.in_store("role", partial(self._release, token), then=lambda _: None)
            return
        if self.token is not None and self._until - clock.now() > RENEW_SECONDS:
            return
        self._loop.in_store(
            "role",
            partial(self._claim.take_or_renew, self.token),
            then=self._on_claimed,
            on_error=self._on_claim_failed,
        )

    def _on_claimed(self, held: tuple[str | None, float]) -> None:
        token, until = held
        if self._loop.stopping:
            self.token, self._until = token, until  # given up as the relay stops
            return
        if token is None:
            if self.token is not None:
                log.warning("the relay role passed to another relay: standing by")
            self.token, self._until = None, 0.0
            return
        fresh, was_leader = token != self.token, self.is_leader()
        self.token, self._until = token, until
        if fresh:
            log.info("holding the relay role: this relay publishes the outbox")
        if fresh or not was_leader:  # taken, or renewed after it had run out (a stopped process)
            self._elected()

    def _on_claim_failed(self) -> None:
        if self.token is not None and not self.is_leader():
            log.warning("could not renew the relay role in time: no publishing until it is renewed")

    def _release(self, token: str) -> None:
        try:
            self._claim.give_up(token)
        except Exception as exc:  # the role then expires by itself
            log.warning(
                "could not hand back the relay role (%s): it expires within %.0fs", exc, LEADER_SECONDS
            )

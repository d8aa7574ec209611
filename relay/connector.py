"""The publisher's connection to the broker: it connects to the first node of RABBITMQ_URL that answers;
after a lost connection it tries the node after the lost one first; while no node answers it keeps trying
them with bounded, jittered backoff."""

from __future__ import annotations

import contextlib
import logging

import pika

from outbox_bridge.broker.connection import BrokerNodes, broker_addresses, describe, node_of
from outbox_bridge.core.backoff import compute_backoff
from outbox_bridge.core.settings import Settings
from outbox_bridge.relay.link import BrokerLink, LinkEvents
from outbox_bridge.relay.loop import RelayLoop
from outbox_bridge.relay.window import Confirmation, Sent
from outbox_bridge.telemetry.instruments import BROKER_RECONNECTS

log = logging.getLogger("relay")

RECONNECT_BASE_SECONDS = 0.25
RECONNECT_CAP_SECONDS = 4.0
LINK_CLOSE_TIMEOUT_SECONDS = 3.0


class Connector:
    """Keeps one `BrokerLink` open while the relay runs. The link's events reach `events` only for the
    current link, and `on_ready` only while the relay is not stopping (a link that comes up then is closed).
    Only the IOLoop's thread touches it."""

    def __init__(self, settings: Settings, loop: RelayLoop, events: LinkEvents) -> None:
        self._settings = settings
        self._loop = loop
        self._events = events
        blocked = settings.relay_lease_seconds / 2
        self.nodes = BrokerNodes(
            broker_addresses(settings.rabbitmq_url, name="relay", blocked_timeout=blocked)
        )
        # The nodes this round of connection attempts has yet to try; a round that reaches none backs off.
        self._untried: list[pika.URLParameters] = []
        self.link: BrokerLink | None = None
        self.ready = False  # the link is up, its channel in confirm mode and the topology declared
        self._failures = 0

    @property
    def node(self) -> str | None:
        """The node the link is connected to (`host:port`), None while it is not."""
        link = self.link
        return node_of(link.params) if link is not None and self.ready else None

    @property
    def unconfirmed(self) -> int:
        return len(self.link.window) if self.link is not None else 0

    def trouble(self) -> str | None:
        """Why this relay may not lead now: no broker connection, or a confirm awaited for as long as a row
        lease would last (`relay_lease_seconds`). None: it may."""
        link = self.link
        if link is None or not self.ready:
            return "no broker connection"
        if link.window.oldest_age() > self._settings.relay_lease_seconds:
            return "confirms stopped coming"
        return None

    def connect(self) -> None:
        if self._loop.stopping:
            return
        if not self._untried:
            self._untried = self.nodes.in_order()
        self.link = BrokerLink(self._settings, self._untried.pop(0), self._loop.ioloop, self)

    def begin_stop(self, grace: float) -> None:
        """Connect no more; once `grace` has passed, close the link whether or not its confirms are in."""
        self._loop.cancel("reconnect")
        self._loop.ioloop.call_later(grace, self._stop_waiting_for_confirms)

    def drain(self) -> bool:
        """While the relay stops: close the link once its confirms are in (or at once when it is not up).
        True once there is no link."""
        link = self.link
        if link is None:
            return True
        if not self.ready or len(link.window) == 0:
            self.close()
        return False

    def close(self) -> None:
        """Close the connection; if the broker does not answer the close in time, give the link up."""
        if self.link is None:
            return
        self.link.close()
        self._loop.later("abandon", LINK_CLOSE_TIMEOUT_SECONDS, self._abandon_unanswered)

    def drop(self, reason: str) -> None:
        """Give the link up at once, in whatever state pika left it: `on_down` follows with every
        unconfirmed message, and a new connection as after any loss."""
        link = self.link
        if link is not None:
            with contextlib.suppress(Exception):
                link.close()
            link.abandon(reason)

    # -- the link's events ---------------------------------------------------------------------------------

    def on_ready(self, link: BrokerLink) -> None:
        if link is not self.link:
            return
        self.ready = True
        self._failures = 0
        self._untried = []
        log.info("broker connection up: %s; topology declared", describe(link.params))
        if self._loop.stopping:
            self.close()
            return
        self._events.on_ready(link)

    def on_confirmation(self, link: BrokerLink, confirmation: Confirmation) -> None:
        if link is self.link:
            self._events.on_confirmation(link, confirmation)

    def on_down(self, link: BrokerLink, reason: str, unconfirmed: tuple[Sent, ...]) -> None:
        if link is not self.link:
            return
        was_ready, self.link, self.ready = self.ready, None, False
        self._events.on_down(link, reason, unconfirmed)
        if self._loop.stopping:
            return
        if was_ready:
            self.nodes.lost(link.params)  # the next round tries the node after it first
            self._untried = []
        elif self._untried:  # this node did not answer: the round goes on with the next one at once
            log.info("broker node %s unreachable (%s); trying the next", describe(link.params), reason)
            self._loop.later("reconnect", 0.0, self.connect)
            return
        self._failures += 1
        BROKER_RECONNECTS.inc()
        delay = compute_backoff(self._failures, base=RECONNECT_BASE_SECONDS, cap=RECONNECT_CAP_SECONDS)
        if was_ready:
            log.warning(
                "broker connection lost (%s); %d unconfirmed rows go back to the outbox; "
                "reconnecting in %.2fs",
                reason,
                len(unconfirmed),
                delay,
            )
        elif self._failures <= 3 or self._failures % 10 == 0:
            # A long outage logs its first attempts, then every tenth.
            attempt = self._failures
            log.warning("broker unreachable (%s), attempt %d; reconnecting in %.2fs", reason, attempt, delay)
        self._loop.later("reconnect", delay, self.connect)

    # -- shutdown ------------------------------------------------------------------------------------------

    def _stop_waiting_for_confirms(self) -> None:
        if self.link is not None and not self._loop.stopped:
            log.warning(
                "%d messages still unconfirmed at the deadline: releasing them", len(self.link.window)
            )
            self.close()

    def _abandon_unanswered(self) -> None:
        if self.link is not None:
            self.link.abandon(f"the broker did not answer the close within {LINK_CLOSE_TIMEOUT_SECONDS}s")

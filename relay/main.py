"""`outbox-bridge relay`: run the relay until SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import signal
from functools import partial
from types import FrameType
from typing import Any

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.heartbeats import Heartbeat
from outbox_bridge.relay.relay import Relay
from outbox_bridge.telemetry import tracing
from outbox_bridge.worker.metrics import serve_metrics

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def relay_detail(relay: Relay) -> dict[str, Any]:
    """What a relay reports at each beat: whether it is connected and publishes, and the broker node it is
    connected to (`broker`, `host:port`; absent while it is not)."""
    node = relay.node
    detail: dict[str, Any] = {"broker_connected": relay.connected, "publishing": relay.publishing}
    return detail | ({"broker": node} if node is not None else {})


def run(settings: Settings) -> int:
    """Publish the outbox until asked to stop. Exit code 0 when everything held was written back."""
    # pika narrates every connection attempt; the relay logs what matters itself.
    logging.getLogger("pika").setLevel(logging.CRITICAL)
    tracing.configure("relay")
    engine = db.make_engine(settings, "relay")
    relay = Relay(settings, engine)
    heartbeat = Heartbeat(engine, settings, "relay", partial(relay_detail, relay))

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        relay.request_stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    serve_metrics(engine, settings, "relay", dead_letters=True)
    heartbeat.start()
    try:
        relay.run()
    finally:
        heartbeat.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        engine.dispose()
    return 0 if relay.clean_exit else 1

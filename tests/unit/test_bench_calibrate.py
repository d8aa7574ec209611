"""The benchmark's broker calibration says what went wrong instead of failing the deployment's run."""

from __future__ import annotations

import socket

from outbox_bridge.bench.calibrate import quorum_hop


def test_a_broker_that_cannot_be_reached_gives_an_error_not_figures() -> None:
    with socket.socket() as unused:  # a port nothing listens on once this is closed
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    found = quorum_hop(f"amqp://guest:guest@127.0.0.1:{port}/%2F", rounds=3)
    assert "publish_to_delivery_ms" not in found
    assert found["error"].startswith("AMQPConnectionError")

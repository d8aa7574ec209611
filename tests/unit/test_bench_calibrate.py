"""The benchmark's broker calibrations say what went wrong instead of failing the deployment's run."""

from __future__ import annotations

import socket

from outbox_bridge.bench.calibrate import broker_floor, quorum_hop


def _unreachable() -> str:
    with socket.socket() as unused:  # a port nothing listens on once this is closed
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    return f"amqp://guest:guest@127.0.0.1:{port}/%2F"


def test_a_broker_that_cannot_be_reached_gives_an_error_not_figures() -> None:
    found = quorum_hop(_unreachable(), rounds=3)
    assert "publish_to_delivery_ms" not in found
    assert found["error"].startswith("AMQPConnectionError")


def test_the_floor_of_a_broker_that_cannot_be_reached_is_an_error_not_figures() -> None:
    found = broker_floor(_unreachable(), messages=10)
    assert "messages_per_second" not in found
    assert found["error"].startswith("AMQPConnectionError")

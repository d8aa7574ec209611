"""The benchmark's broker floor: RabbitMQ alone, used as the broker path uses it, with every message
published, confirmed and consumed, and nothing left behind."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest

from outbox_bridge.bench.calibrate import broker_floor


def test_every_message_is_confirmed_and_consumed_and_the_queue_is_gone(
    rabbitmq_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    declared: list[str] = []
    declare = pika.adapters.blocking_connection.BlockingChannel.queue_declare

    def noting(channel: object, queue: str, *args: object, **kwargs: object) -> object:
        declared.append(queue)
        return declare(channel, queue, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pika.adapters.blocking_connection.BlockingChannel, "queue_declare", noting)
    found = broker_floor(rabbitmq_url, messages=1000)
    assert "error" not in found, found
    assert found["messages"] == 1000 and found["messages_per_second"] > 0
    cpu = found["cpu_ms_per_message"]
    assert set(cpu) == {"machine", "rabbitmq", "publisher", "consumer"}
    # RabbitMQ's CPU is read in clock ticks from /proc: a short run may see none of its own.
    assert cpu["machine"] > 0 and cpu["publisher"] > 0 and cpu["consumer"] > 0, cpu
    assert cpu["machine"] >= cpu["rabbitmq"] >= 0
    [queue] = declared
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):  # 404: deleted after the run
            connection.channel().queue_declare(queue, passive=True)
    finally:
        connection.close()

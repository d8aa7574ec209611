"""The broker topology, declared the same way by the relay and the consumers (declarations are idempotent).

Durable direct exchange `jobs`; durable quorum queue `jobs` bound with routing key `jobs`, with an explicit
delivery limit and dead-lettering to the direct exchange `jobs.dead`, which routes to the durable queue
`jobs.dead`. Names come from settings so tests can use their own."""

from __future__ import annotations

from typing import Any

from jobstore.settings import Settings

ROUTING_KEY = "jobs"


def queue_arguments(settings: Settings) -> dict[str, Any]:
    return {
        "x-queue-type": "quorum",
        "x-delivery-limit": settings.delivery_limit,
        "x-dead-letter-exchange": settings.dead_letter_exchange,
        "x-dead-letter-routing-key": ROUTING_KEY,
    }


def declare(channel: Any, settings: Settings) -> None:
    """Declare exchanges, queues and bindings on a pika `BlockingChannel` (or any channel with the same
    blocking method signatures)."""
    channel.exchange_declare(settings.dead_letter_exchange, exchange_type="direct", durable=True)
    channel.queue_declare(settings.dead_letter_queue, durable=True, arguments={"x-queue-type": "quorum"})
    channel.queue_bind(settings.dead_letter_queue, settings.dead_letter_exchange, routing_key=ROUTING_KEY)
    channel.exchange_declare(settings.exchange, exchange_type="direct", durable=True)
    channel.queue_declare(settings.queue, durable=True, arguments=queue_arguments(settings))
    channel.queue_bind(settings.queue, settings.exchange, routing_key=ROUTING_KEY)

"""The broker topology, declared the same way by the relay and the consumers (declarations are idempotent).

Durable direct exchange `jobs`; durable quorum queue `jobs` bound with routing key `jobs`, with an explicit
delivery limit and dead-lettering to the direct exchange `jobs.dead`, which routes to the durable queue
`jobs.dead`. Names come from settings so tests can use their own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from outbox_bridge.core.settings import Settings

ROUTING_KEY = "jobs"


def queue_arguments(settings: Settings) -> dict[str, Any]:
    return {
        "x-queue-type": "quorum",
        "x-delivery-limit": settings.delivery_limit,
        "x-dead-letter-exchange": settings.dead_letter_exchange,
        "x-dead-letter-routing-key": ROUTING_KEY,
    }


def _declarations(settings: Settings) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """The declarations in order, as (channel method, positional args, keyword args)."""
    return [
        ("exchange_declare", (settings.dead_letter_exchange,), {"exchange_type": "direct", "durable": True}),
        (
            "queue_declare",
            (settings.dead_letter_queue,),
            {"durable": True, "arguments": {"x-queue-type": "quorum"}},
        ),
        (
            "queue_bind",
            (settings.dead_letter_queue, settings.dead_letter_exchange),
            {"routing_key": ROUTING_KEY},
        ),
        ("exchange_declare", (settings.exchange,), {"exchange_type": "direct", "durable": True}),
        ("queue_declare", (settings.queue,), {"durable": True, "arguments": queue_arguments(settings)}),
        ("queue_bind", (settings.queue, settings.exchange), {"routing_key": ROUTING_KEY}),
    ]


def declare(channel: Any, settings: Settings) -> None:
    """Declare exchanges, queues and bindings on a pika `BlockingChannel` (or any channel with the same
    blocking method signatures)."""
    for method, args, kwargs in _declarations(settings):
        getattr(channel, method)(*args, **kwargs)


def declare_async(channel: Any, settings: Settings, on_done: Callable[[], None]) -> None:
    """The same declarations on a pika asynchronous `Channel`, one after another; `on_done()` runs once the
    broker has accepted them all. A refused declaration closes the channel instead (its close callbacks say
    why) and `on_done` never runs."""
    pending = iter(_declarations(settings))

    def next_declaration(_frame: object = None) -> None:
        step = next(pending, None)
        if step is None:
            on_done()
            return
        method, args, kwargs = step
        getattr(channel, method)(*args, callback=next_declaration, **kwargs)

    next_declaration()


def delete(channel: Any, settings: Settings) -> None:
    """Delete what `declare` declared, messages and all, on a pika `BlockingChannel`: for a run that used
    names of its own (the demo), so nothing of it stays on the broker."""
    channel.queue_delete(settings.queue)
    channel.exchange_delete(settings.exchange)
    channel.queue_delete(settings.dead_letter_queue)
    channel.exchange_delete(settings.dead_letter_exchange)

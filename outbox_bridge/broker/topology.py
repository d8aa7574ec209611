"""The broker topology, declared the same way by the relay and the consumers (declarations are idempotent).

Durable direct exchange `jobs`; durable quorum queue `jobs` bound with routing key `jobs`, with an explicit
delivery limit and dead-lettering to the direct exchange `jobs.dead`, which routes to the durable queue
`jobs.dead`. That queue is the `default` one of the named queues kinds run on (`@kind(queue=...)`); each
other named queue Q is a quorum queue `jobs.Q` of its own, bound to the same exchange with routing key
`jobs.Q`, with the same arguments: its dead letters reach `jobs.dead` too. Names come from settings so
tests can use their own."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from outbox_bridge.core.queue_names import DEFAULT_QUEUE
from outbox_bridge.core.settings import Settings

ROUTING_KEY = "jobs"

# A declaration: (channel method, positional args, keyword args).
Declaration = tuple[str, tuple[Any, ...], dict[str, Any]]


def queue_arguments(settings: Settings) -> dict[str, Any]:
    return {
        "x-queue-type": "quorum",
        "x-delivery-limit": settings.delivery_limit,
        "x-dead-letter-exchange": settings.dead_letter_exchange,
        "x-dead-letter-routing-key": ROUTING_KEY,
    }


def queue_name(settings: Settings, queue: str) -> str:
    """The broker queue of the named queue `queue`: `settings.queue` for `default` (the names a deployment
    had before named queues), else `<settings.queue>.<queue>`."""
    return settings.queue if queue == DEFAULT_QUEUE else f"{settings.queue}.{queue}"


def routing_key(queue: str) -> str:
    """The routing key the relay publishes a job of the named queue `queue` with."""
    return ROUTING_KEY if queue == DEFAULT_QUEUE else f"{ROUTING_KEY}.{queue}"


def clash(settings: Settings, queue: str) -> str | None:
    """Why the named queue `queue` cannot have a broker queue of its own (its name would be the dead-letter
    queue's), or None."""
    if queue_name(settings, queue) == settings.dead_letter_queue:
        return f"queue {queue!r} would be the dead-letter queue {settings.dead_letter_queue!r}: rename it"
    return None


def queue_declarations(settings: Settings, queue: str) -> list[Declaration]:
    """The declarations of one named queue's broker queue and its binding (the exchange exists)."""
    name = queue_name(settings, queue)
    return [
        ("queue_declare", (name,), {"durable": True, "arguments": queue_arguments(settings)}),
        ("queue_bind", (name, settings.exchange), {"routing_key": routing_key(queue)}),
    ]


def _declarations(settings: Settings, queues: Iterable[str]) -> list[Declaration]:
    """The declarations in order: the dead letters', the exchange, the `default` queue, then `queues`."""
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
        *queue_declarations(settings, DEFAULT_QUEUE),
        *(step for queue in _others(queues) for step in queue_declarations(settings, queue)),
    ]


def _others(queues: Iterable[str]) -> list[str]:
    return sorted({queue for queue in queues if queue != DEFAULT_QUEUE})


def declare(channel: Any, settings: Settings, queues: Iterable[str] = ()) -> None:
    """Declare exchanges, the `default` queue, the broker queue of each of `queues` and the bindings on a
    pika `BlockingChannel` (or any channel with the same blocking method signatures)."""
    for method, args, kwargs in _declarations(settings, queues):
        getattr(channel, method)(*args, **kwargs)


def declare_async(channel: Any, settings: Settings, on_done: Callable[[], None]) -> None:
    """The declarations of `declare` without other queues on a pika asynchronous `Channel` (`run_async`)."""
    run_async(channel, _declarations(settings, ()), on_done)


def run_async(channel: Any, declarations: Iterable[Declaration], on_done: Callable[[], None]) -> None:
    """`declarations` on a pika asynchronous `Channel`, one after another; `on_done()` runs once the broker
    has accepted them all. A refused declaration closes the channel instead (its close callbacks say why)
    and `on_done` never runs."""
    pending = iter(declarations)

    def next_declaration(_frame: object = None) -> None:
        step = next(pending, None)
        if step is None:
            on_done()
            return
        method, args, kwargs = step
        getattr(channel, method)(*args, callback=next_declaration, **kwargs)

    next_declaration()


def delete(channel: Any, settings: Settings, queues: Iterable[str] = ()) -> None:
    """Delete what `declare` declared, messages and all, on a pika `BlockingChannel`: for a run that used
    names of its own (the demo), so nothing of it stays on the broker."""
    for queue in _others(queues):
        channel.queue_delete(queue_name(settings, queue))
    channel.queue_delete(settings.queue)
    channel.exchange_delete(settings.exchange)
    channel.queue_delete(settings.dead_letter_queue)
    channel.exchange_delete(settings.dead_letter_exchange)

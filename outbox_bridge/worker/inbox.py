"""The queue a worker process's store writer takes its work from: items put by other threads, taken a batch
at a time, with one object that says stop; and which of the deliveries it holds the broker link has said
were held too long (`consumer.link.DeliveryAges`)."""

from __future__ import annotations

import collections
import queue
from typing import Any

STOP: Any = object()
MAX_BATCH = 512


def take_batch(
    source: queue.SimpleQueue[Any], limit: int = MAX_BATCH, timeout: float | None = None
) -> list[Any] | None:
    """Wait for one item (at most `timeout` seconds: then an empty batch), then take whatever else is
    already waiting (up to `limit`); None at STOP."""
    try:
        first = source.get(timeout=timeout)
    except queue.Empty:
        return []
    if first is STOP:
        return None
    return [first, *take_waiting(source, limit - 1)]


def take_waiting(source: queue.SimpleQueue[Any], limit: int = MAX_BATCH) -> list[Any]:
    """Whatever is already waiting, up to `limit`, without waiting; a STOP is left for the next take."""
    batch: list[Any] = []
    while len(batch) < limit:
        try:
            item = source.get_nowait()
        except queue.Empty:
            break
        if item is STOP:
            source.put(STOP)  # seen again by the next take, after this batch is handled
            break
        batch.append(item)
    return batch


def held_past(delivery: Any, generation: int, upto: int) -> bool:
    """Whether `delivery` (a `consumer.link.Delivery`) is one of those the link said were held too long:
    of connection `generation`, with a tag up to `upto`."""
    return bool(delivery.generation == generation and delivery.tag <= upto)


def take_held(waiting: collections.deque[Any], generation: int, upto: int) -> list[Any]:
    """Take the deliveries of `waiting` held too long (`held_past`) out of it, in order; the rest stay, in
    theirs."""
    taken = [delivery for delivery in waiting if held_past(delivery, generation, upto)]
    if taken:
        kept = [delivery for delivery in waiting if not held_past(delivery, generation, upto)]
        waiting.clear()
        waiting.extend(kept)
    return taken

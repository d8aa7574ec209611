"""The queue a worker process's store writer takes its work from: items put by other threads (deliveries,
finished outcomes), taken a batch at a time, with one object that says stop and one that only wakes it."""

from __future__ import annotations

import queue
from typing import Any

STOP: Any = object()
# Put by `StoreWriter.nudge`: look at the table now (a commit announced due jobs, or the process stops).
NUDGE: Any = object()
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

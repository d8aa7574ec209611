"""The names of the named queues kinds run on (`@kind(queue=...)`): what the kinds, the store, the broker's
topology and the worker processes all name a queue by."""

from __future__ import annotations

import re

QUEUE_RULE = "1 to 64 characters of a-z, 0-9, '_' and '-'"
_QUEUE = re.compile(r"[a-z0-9_-]{1,64}")
# The queue of a kind that names none, and of every job accepted before kinds had queues.
DEFAULT_QUEUE = "default"


def is_queue_name(name: object) -> bool:
    """Whether `name` may name a queue (`QUEUE_RULE`)."""
    return isinstance(name, str) and _QUEUE.fullmatch(name) is not None

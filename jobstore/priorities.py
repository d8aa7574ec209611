"""A job's priority: `high`, `normal` or `low` in the API, a small rank in the store (0, 1, 2), so the
store's orders (the relay's lease, the baseline's claim) sort by it as a number: higher priority first."""

from __future__ import annotations

from enum import IntEnum


class Priority(IntEnum):
    HIGH = 0
    NORMAL = 1
    LOW = 2

    @property
    def label(self) -> str:
        """The name the API and the command line use: `high`, `normal`, `low`."""
        return self.name.lower()

    @classmethod
    def named(cls, label: str) -> Priority:
        """The priority called `label`; KeyError for any other name."""
        return cls[label.upper()]


LABELS = tuple(priority.label for priority in Priority)

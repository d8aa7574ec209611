"""The schedules the kinds modules of this process declare in code (`outbox_bridge.schedule`), by tenant and
name: what the relay that holds the relay role brings into the store (`relay.schedules.sync_declared`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from outbox_bridge.core.recurrence import Recurrence
from outbox_bridge.handlers.base import KindError


@dataclass(frozen=True)
class DeclaredSchedule:
    """A schedule as a kinds module declared it: `priority` None is the kind's default; `declared_in` names
    the module and line."""

    tenant: str
    name: str
    kind: str
    payload: dict[str, Any]
    recurrence: Recurrence
    priority: str | None
    declared_in: str

    @property
    def module(self) -> str:
        """The module that declared it: what the store records as its author (`code:<module>`)."""
        return self.declared_in.rpartition(":")[0]


DECLARED: dict[tuple[str, str], DeclaredSchedule] = {}


def register(new: DeclaredSchedule) -> DeclaredSchedule:
    """Add `new` to the schedules this process declares; `KindError` naming both places when its tenant has
    declared one of its name already."""
    before = DECLARED.setdefault((new.tenant, new.name), new)
    if before is not new:
        raise KindError(
            f"schedule {new.tenant}/{new.name} is declared twice: in {before.declared_in} and in "
            f"{new.declared_in}"
        )
    return new

"""The kinds a process runs: the built-in ones, and a team's own, loaded at start from the modules named by
OUTBOX_BRIDGE_KINDS and the `outbox_bridge.kinds` entry point group; and which of them a deployment accepts.

`api`, `consumer` and `worker` call `load` before they take any work, so all three know the same kinds. A
module that does not import, or a kind name defined twice, is a `KindError` with a one-line message."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from importlib.metadata import entry_points

from outbox_bridge.core.settings import EXAMPLE_KINDS, TEST_KINDS, Settings

# The built-in kinds register themselves through the same `kind` a team's own kinds use.
from outbox_bridge.handlers import document, export, notify, simple  # noqa: F401
from outbox_bridge.handlers.base import KINDS, KindError, kind

ENTRY_POINT_GROUP = "outbox_bridge.kinds"
BUILT_IN = tuple(KINDS)
# The built-in kinds a deployment runs only where it names them (ALLOWED_KINDS) or in development.
NAMED_ONLY = frozenset(TEST_KINDS + EXAMPLE_KINDS)

__all__ = ["BUILT_IN", "ENTRY_POINT_GROUP", "KINDS", "KindError", "accepted", "is_accepted", "kind", "load"]


def load(modules: Iterable[str]) -> list[str]:
    """Import each of `modules` (OUTBOX_BRIDGE_KINDS), then every module of the `outbox_bridge.kinds` entry
    point group: importing a kinds module registers its kinds. Returns the names of the kinds known now.
    Loading again is harmless: a module is imported once."""
    for name in modules:
        try:
            importlib.import_module(name)
        except KindError:
            raise
        except Exception as exc:
            raise KindError(
                f"the kinds module {name!r} (OUTBOX_BRIDGE_KINDS) does not import: {_said(exc)}"
            ) from exc
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            point.load()
        except KindError:
            raise
        except Exception as exc:
            where = f"{point.name} = {point.value}"
            raise KindError(
                f"the kinds entry point {where!r} ({ENTRY_POINT_GROUP}) does not load: {_said(exc)}"
            ) from exc
    return sorted(KINDS)


def accepted(settings: Settings) -> tuple[str, ...]:
    """The kinds this deployment accepts (`is_accepted`), sorted."""
    return tuple(sorted(name for name in KINDS if is_accepted(settings, name)))


def is_accepted(settings: Settings, name: str) -> bool:
    """Whether the deployment accepts the known kind `name`: the ones ALLOWED_KINDS names; without
    ALLOWED_KINDS every one but the built-in test and example kinds, which a development setup accepts
    too."""
    if name not in KINDS:
        return False
    if settings.allowed_kinds is not None:
        return name in settings.allowed_kinds
    return settings.outbox_bridge_dev or name not in NAMED_ONLY


def _said(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

"""Every kind the code knows. Which of them a deployment accepts is `Settings.allowed_kinds`."""

from __future__ import annotations

from outbox_bridge.handlers.base import Kind
from outbox_bridge.handlers.document import DOCUMENT
from outbox_bridge.handlers.export import EXPORT
from outbox_bridge.handlers.notify import NOTIFY
from outbox_bridge.handlers.simple import FLAKY, NOOP, SLEEP

KINDS: dict[str, Kind] = {kind.name: kind for kind in (EXPORT, DOCUMENT, NOTIFY, NOOP, SLEEP, FLAKY)}

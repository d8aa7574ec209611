"""Every kind the code knows. Which of them a deployment accepts is `Settings.allowed_kinds`."""

from __future__ import annotations

from handlers.base import Kind
from handlers.document import DOCUMENT
from handlers.export import EXPORT
from handlers.notify import NOTIFY
from handlers.simple import FLAKY, NOOP, SLEEP

KINDS: dict[str, Kind] = {kind.name: kind for kind in (EXPORT, DOCUMENT, NOTIFY, NOOP, SLEEP, FLAKY)}

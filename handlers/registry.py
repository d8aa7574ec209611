"""Every kind the code knows. Which of them a deployment accepts is `Settings.allowed_kinds`."""

from __future__ import annotations

from handlers.base import Kind
from handlers.simple import FLAKY, NOOP, SLEEP

KINDS: dict[str, Kind] = {kind.name: kind for kind in (NOOP, SLEEP, FLAKY)}

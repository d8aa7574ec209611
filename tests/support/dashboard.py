"""Reading what the dashboard answered, as a browser would keep it."""

from __future__ import annotations

import re
from urllib.parse import unquote

from httpx import Response

from outbox_bridge.api.dashboard.access import FLASH_COOKIE

_SIGNED = re.compile(r"(?P<payload>.*)\.(?P<mac>[0-9a-f]{64})")


def flash_of(answer: Response) -> str:
    """The flash message `answer` sets, as `level:text`, its signature left off ("" when it sets none).
    That the dashboard shows only a flash it signed is test_dashboard_forgery's business."""
    raw = answer.cookies.get(FLASH_COOKIE, "")
    if not raw:
        return ""
    signed = _SIGNED.fullmatch(raw)
    assert signed, f"the flash cookie is not signed: {raw!r}"
    return unquote(signed["payload"])

"""What every payload must be, whatever its kind: storable as canonical JSON text.

Python's JSON parser accepts things the store cannot keep (lone surrogates, which UTF-8 cannot encode; NaN
and Infinity, which JSON does not have) and nesting deep enough to exhaust the recursion limit later, when
the store fingerprints the payload. Each is a client error, refused here before any transaction starts.

JSON text a payload comes in (`POST /jobs`'s body, `schedules add --payload`, the dashboard's form) is read
by `loads`, which refuses nesting past the parser's own recursion limit with the same problem, where
`json.loads` would raise `RecursionError`.
"""

from __future__ import annotations

import json
from typing import Any

from outbox_bridge.api.problems import INVALID_PAYLOAD, ProblemError

MAX_DEPTH = 32


def loads(text: str | bytes) -> Any:
    """JSON text as Python, as `json.loads` reads it (`ValueError` when it is not JSON); a 400
    `invalid-payload` problem, the one `check_encodable` raises, when it nests too deep for the parser to
    follow (far deeper than `MAX_DEPTH`). What it returns is still for `check_encodable` to check."""
    try:
        return json.loads(text)
    except RecursionError:
        raise _too_deep() from None


def check_encodable(payload: dict[str, Any]) -> None:
    """Raise a 400 `invalid-payload` problem unless `payload` is plain, finite, UTF-8-encodable JSON
    nested at most `MAX_DEPTH` levels."""
    if _depth(payload) > MAX_DEPTH:
        raise _too_deep()
    try:
        json.dumps(payload, ensure_ascii=False, allow_nan=False).encode()
    except (ValueError, UnicodeEncodeError):
        raise INVALID_PAYLOAD.error(
            "The payload holds text that is not valid Unicode, or a number JSON cannot express."
        ) from None


def _too_deep() -> ProblemError:
    return INVALID_PAYLOAD.error(f"The payload is nested more than {MAX_DEPTH} levels deep.")


def _depth(value: Any) -> int:
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, level = pending.pop()
        if not isinstance(item, dict | list):
            continue
        children = item.values() if isinstance(item, dict) else item
        deepest = max(deepest, level)
        if level <= MAX_DEPTH:
            pending.extend((child, level + 1) for child in children)
    return deepest

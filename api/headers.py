"""Headers on every answer (`api.edge.Edge` sets them). `X-Content-Type-Options: nosniff` everywhere, so a
browser never reads a body as another type than the one sent. `Cache-Control: no-store` on the job and batch
routes and the dashboard, whose answers are one tenant's or one operator's and change: no shared cache or
browser history keeps them. The dashboard may not be framed by another page (its buttons act), by either the
old or the CSP header."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

EVERYWHERE = {"X-Content-Type-Options": "nosniff"}
PRIVATE = {"Cache-Control": "no-store"}
NOT_FRAMEABLE = {"X-Frame-Options": "DENY", "Content-Security-Policy": "frame-ancestors 'none'"}
PRIVATE_PREFIXES = ("/jobs", "/batches", "/ui")


def headers_for(path: str) -> dict[str, str]:
    """The headers every answer at `path` carries, whatever its status."""
    private, not_frameable = _sets_at(path)
    found = dict(EVERYWHERE)
    if private:
        found.update(PRIVATE)
    if not_frameable:
        found.update(NOT_FRAMEABLE)
    return found


def _sets_at(path: str) -> tuple[bool, bool]:
    """Whether answers at `path` carry `PRIVATE` and `NOT_FRAMEABLE` (beside `EVERYWHERE`)."""
    return any(_under(path, prefix) for prefix in PRIVATE_PREFIXES), _under(path, "/ui")


Raw = list[tuple[bytes, bytes]]


def encoded(headers: Mapping[str, str]) -> Raw:
    """`headers` as an ASGI answer carries them: names lower-case, both as bytes."""
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]


def put(raw: Raw, extra: Sequence[tuple[bytes, bytes]]) -> None:
    """Set each of `extra` (`encoded`) in `raw`, an answer's header list: in place of the first header of
    its name, any others of that name dropped; appended when there is none (as Starlette's `MutableHeaders`
    sets one)."""
    names = {name for name, _ in extra}
    if all(name not in names for name, _ in raw):  # the usual case: none of them set yet
        raw.extend(extra)
        return
    for name, value in extra:
        found = [index for index, (present, _) in enumerate(raw) if present == name]
        for index in reversed(found[1:]):
            del raw[index]
        if found:
            raw[found[0]] = (name, value)
        else:
            raw.append((name, value))


_ENCODED: dict[tuple[bool, bool], Raw] = {}


def encoded_for(path: str) -> Raw:
    """`encoded(headers_for(path))`, made once for each of the few sets there are (do not change it)."""
    which = _sets_at(path)
    found = _ENCODED.get(which)
    if found is None:
        found = _ENCODED[which] = encoded(headers_for(path))
    return found


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")

"""The installed version of outbox-bridge, as processes and the api report it."""

from __future__ import annotations

from importlib import metadata


def installed() -> str:
    """The version pip installed (`pyproject.toml`'s), or `unknown` when the package is not installed."""
    try:
        return metadata.version("outbox-bridge")
    except metadata.PackageNotFoundError:
        return "unknown"

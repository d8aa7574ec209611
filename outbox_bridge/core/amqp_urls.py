"""RABBITMQ_URL as a list: the AMQP URLs of the broker's nodes, comma-separated, each checked when the
settings are read so that a bad one is refused at start, named by its place in the list and never shown with
its credentials."""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

SCHEMES = ("amqp", "amqps")


def split(value: str) -> tuple[str, ...]:
    """The addresses `value` lists, in its order, without the spaces around them (a comma in a password is
    written `%2C`). One URL is a list of one; an empty value too (pika's default, `localhost:5672`)."""
    return tuple(part.strip() for part in value.split(",") if part.strip()) or ("",)


def check(value: str) -> tuple[str, ...]:
    """The addresses `value` lists (`split`), or ValueError naming the first that pika cannot use by its place
    in the list. The message never quotes the address's user, password, host or port: a misplaced comma can
    put any of them anywhere."""
    import pika  # here, not at the top: reading the settings does not need the AMQP client otherwise

    addresses = split(value)
    for index, url in enumerate(addresses, start=1):
        place = f"address {index} of {len(addresses)}" if len(addresses) > 1 else "the address"
        scheme = urlsplit(url).scheme.lower() if "://" in url else ""
        if url and scheme not in SCHEMES:
            raise ValueError(f"{place} does not start with amqp:// or amqps://")
        try:
            pika.URLParameters(url)
        except ValueError as exc:
            raise ValueError(f"{place} is not a usable AMQP URL{_reason(str(exc), url)}") from None
    return addresses


def _reason(said: str, url: str) -> str:
    """pika's reason, unless it quotes any part of the URL's user, password, host or port."""
    netloc = urlsplit(url).netloc
    parts = {part for text in (netloc, unquote(netloc)) for part in re.split(r"[:@\[\]]", text) if part}
    if any(part in said for part in parts):
        return " (is its port a number? a comma in a password is written %2C)"
    return f": {said}"

"""Which addresses a completion webhook may reach: only public ones, unless the deployment allows private
targets (`WEBHOOK_ALLOW_PRIVATE=1`).

A host is judged by the addresses it resolves to, as the relay's connection resolves it (`resolve`: the
system's `getaddrinfo`, which also reads the disguised IPv4 forms `2130706433`, `0x7f000001`, `0177.0.0.1`
and `127.1` as 127.0.0.1). An IPv4-mapped IPv6 address (`::ffff:127.0.0.1`) is judged as the IPv4 address
it carries. `webhooks add` asks before it registers an endpoint; the relay asks again at each connect and
then connects to the very address it judged, so a DNS answer that changes in between cannot reach one.
"""

from __future__ import annotations

import ipaddress
import socket

ALLOW = "set WEBHOOK_ALLOW_PRIVATE=1 to allow private targets"
# The first rule an address breaks names it; `is_global` catches what the others do not (shared address
# space 100.64.0.0/10, documentation and benchmarking ranges, ...).
_RULES = (
    ("is_unspecified", "an unspecified"),
    ("is_loopback", "a loopback"),
    ("is_link_local", "a link-local"),
    ("is_multicast", "a multicast"),
    ("is_private", "a private"),
    ("is_reserved", "a reserved"),
)


class PrivateDestination(Exception):
    """A destination the relay may not reach; the message is the one-line refusal naming the rule."""


def refusal(address: str) -> str | None:
    """Why a webhook may not be sent to `address` (an IPv4 or IPv6 address as text), in one line; None for
    a public address."""
    ip = ipaddress.ip_address(address.partition("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for rule, words in _RULES:
        if getattr(ip, rule):
            return f"refused: {address} is {words} address; {ALLOW}"
    if not ip.is_global:
        return f"refused: {address} is not a public address; {ALLOW}"
    return None


def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to for a TCP connection, in the resolver's order, each once;
    `OSError` (`socket.gaierror`) when it resolves to none."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


def checked(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to, when every one of them is public; `PrivateDestination` naming the
    first that is not. `OSError` when it resolves to none."""
    addresses = resolve(host, port)
    for address in addresses:
        why = refusal(address)
        if why is not None:
            raise PrivateDestination(why)
    return addresses

"""Whose connection a peer address is, for the api's per-client share of its connections
(`api.connections.client_of`): one IPv4 address, or one IPv6 /64, whichever form the address comes in."""

from __future__ import annotations

import pytest

from outbox_bridge.api.connections import client_of


@pytest.mark.parametrize(
    ("peer", "client"),
    [
        (("192.0.2.7", 50000), "192.0.2.7"),
        (("2001:db8:1:2:aaaa::1", 50000), "2001:db8:1:2::/64"),
        (("2001:db8:1:2:ffff:ffff:ffff:ffff", 1), "2001:db8:1:2::/64"),
        (("::ffff:192.0.2.7", 50000), "192.0.2.7"),
        (("fe80::1%eth0", 50000), "fe80::/64"),
    ],
)
def test_a_client_is_its_ipv4_address_or_its_ipv6_64(peer: tuple[str, int], client: str) -> None:
    assert client_of(peer) == client


def test_two_addresses_of_one_ipv6_64_are_one_client_and_of_two_are_two() -> None:
    assert client_of(("2001:db8::1", 1)) == client_of(("2001:db8::ffff:2", 2))
    assert client_of(("2001:db8::1", 1)) != client_of(("2001:db8:0:1::1", 1))


def test_a_connection_without_a_peer_address_belongs_to_no_client() -> None:
    assert client_of(None) is None

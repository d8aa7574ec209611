"""RABBITMQ_URL as a list of nodes: how it is split and checked, what is said of a bad address (never its
credentials), and the order a connection tries the nodes in."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from outbox_bridge.broker.connection import (
    BrokerNodes,
    broker_addresses,
    connection_parameters,
    describe,
    node_of,
)
from outbox_bridge.core import amqp_urls
from outbox_bridge.core.settings import Settings

ONE = "amqp://guest:s3cret@rabbit-1:5672/%2F?heartbeat=10"
PASSWORD = "s3cret"


def hosts(url: str) -> list[str]:
    return [node_of(params) for params in broker_addresses(url, name="test")]


def test_one_url_gives_the_same_parameters_as_before() -> None:
    [params] = broker_addresses(ONE, name="test", blocked_timeout=7.0)
    assert params == connection_parameters(ONE, name="test", blocked_timeout=7.0)
    assert amqp_urls.check(ONE) == (ONE,)


def test_several_urls_are_split_in_their_order_without_the_spaces_around_them() -> None:
    url = " amqp://u:p@rabbit-1:5672/%2F ,amqp://u:p@rabbit-2:5673/%2F,  amqps://u:p@rabbit-3/%2F , "
    assert hosts(url) == ["rabbit-1:5672", "rabbit-2:5673", "rabbit-3:5671"]


def test_a_comma_in_a_password_is_written_percent_2c() -> None:
    [params] = broker_addresses("amqp://user:pa%2Css@rabbit-1:5672/%2F", name="test")
    assert params.credentials.password == "pa,ss"


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (f"{ONE},amqp://guest:{PASSWORD}@rabbit-2:56x2/%2F", "address 2 of 2 is not a usable AMQP URL"),
        (f"{ONE},guest:{PASSWORD}@rabbit-2,{ONE}", "address 2 of 3 does not start with amqp:// or amqps://"),
        (f"http://guest:{PASSWORD}@rabbit-1/", "the address does not start with amqp:// or amqps://"),
        (f"amqp://guest:{PASSWORD}@rabbit-1/%2F?beat=1", "the address is not a usable AMQP URL: Unknown URL"),
        # An unencoded comma in the password: the part before it reads as a host and a port.
        (
            f"amqp://guest:pass,{PASSWORD}@rabbit-1/%2F",
            "address 1 of 2 is not a usable AMQP URL (is its port",
        ),
        (f"amqp://guest:{PASSWORD}@rabbit-1/%2F?{PASSWORD}=1", "the address is not a usable AMQP URL (is"),
    ],
    ids=["bad port", "no scheme", "not amqp", "bad option", "comma in the password", "secret in the option"],
)
def test_a_bad_address_is_named_by_its_place_without_its_credentials(url: str, said: str) -> None:
    with pytest.raises(ValueError) as refused:
        amqp_urls.check(url)
    assert said in str(refused.value)
    assert PASSWORD not in str(refused.value)
    assert "guest" not in str(refused.value)
    with pytest.raises(ValidationError) as invalid:
        Settings(rabbitmq_url=url)
    assert said in str(invalid.value)
    assert PASSWORD not in str(invalid.value)
    assert "guest" not in str(invalid.value)


def test_where_a_connection_goes_is_said_without_credentials() -> None:
    [params] = broker_addresses(ONE, name="test")
    assert describe(params) == "rabbit-1:5672//"
    assert node_of(params) == "rabbit-1:5672"


def test_the_nodes_are_tried_from_the_first_then_from_the_one_after_a_lost_one() -> None:
    a, b, c = broker_addresses("amqp://a/%2F,amqp://b/%2F,amqp://c/%2F", name="test")
    nodes = BrokerNodes([a, b, c])
    assert nodes.in_order() == [a, b, c]
    nodes.lost(b)
    assert nodes.in_order() == [c, a, b]
    nodes.lost(c)
    assert nodes.in_order() == [a, b, c]
    one = BrokerNodes([a])
    one.lost(a)
    assert one.in_order() == [a]

"""A consumer whose connection to a node is dropped while it is still being set up (the node took the
connection, then lost it or refused the topology) starts its next attempt from the node after that one, as
after a connection lost while serving: a node that answers and drops everything is not tried first again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pika.exceptions
import pytest

from outbox_bridge.broker.connection import node_of
from outbox_bridge.consumer import link as link_module
from outbox_bridge.consumer.link import DeliveryLink
from tests.conftest import make_settings

NODES = "amqp://guest:guest@rabbit-1:5672/%2F,amqp://guest:guest@rabbit-2:5672/%2F"


class Dropping:
    """A connection the node took and then lost: its first use fails."""

    is_open = False

    def channel(self) -> Any:
        raise pika.exceptions.StreamLostError("Stream connection lost: ConnectionResetError(104)")


@pytest.mark.parametrize("stage", ["channel", "consume"])
def test_a_connection_lost_while_being_set_up_moves_the_next_attempt_to_the_next_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str
) -> None:
    link = DeliveryLink(make_settings(tmp_path, rabbitmq_url=NODES), prefetch=4, on_delivery=lambda d: None)
    tried: list[str] = []

    def connect_first(nodes: list[Any]) -> tuple[Any, Any]:
        tried.append(node_of(nodes[0]))
        return Dropping(), nodes[0]

    monkeypatch.setattr(link_module, "connect_first", connect_first)
    if stage == "consume":  # the channel and the topology were set up; the consumer's registration fails
        monkeypatch.setattr(Dropping, "channel", lambda self: Channel())
        monkeypatch.setattr(link_module.topology, "declare", lambda channel, settings, queues=(): None)
    for _ in range(2):
        with pytest.raises(pika.exceptions.StreamLostError):
            link._connect()
    assert tried == ["rabbit-1:5672", "rabbit-2:5672"]


class Channel:
    def basic_qos(self, **_: Any) -> None:
        return None

    def add_on_cancel_callback(self, _callback: Any) -> None:
        return None

    def basic_consume(self, *_: Any, **__: Any) -> str:
        raise pika.exceptions.StreamLostError("Stream connection lost: ConnectionResetError(104)")

"""The confirm window: which outbox rows a publisher confirm settles, and how."""

from __future__ import annotations

from outbox_bridge.relay.window import ConfirmWindow, Sent


def _window(count: int, token: str = "t") -> ConfirmWindow:
    window = ConfirmWindow()
    for outbox_id in range(1, count + 1):
        window.add(Sent(outbox_id, token))
    return window


def _ids(sent: tuple[Sent, ...]) -> list[int]:
    return [s.outbox_id for s in sent]


def test_delivery_tags_count_from_one_in_publish_order() -> None:
    window = ConfirmWindow()
    assert [window.add(Sent(outbox_id, "t")) for outbox_id in (40, 41, 7)] == [1, 2, 3]


def test_a_multiple_ack_confirms_every_tag_up_to_it() -> None:
    window = _window(5)
    confirmation = window.confirm(3, multiple=True, acked=True)
    assert _ids(confirmation.confirmed) == [1, 2, 3]
    assert confirmation.refused == ()
    assert len(window) == 2


def test_single_confirms_may_arrive_out_of_order() -> None:
    window = _window(3)
    assert _ids(window.confirm(2, multiple=False, acked=True).confirmed) == [2]
    assert _ids(window.confirm(3, multiple=True, acked=True).confirmed) == [1, 3]
    assert len(window) == 0


def test_a_nack_refuses_its_rows() -> None:
    window = _window(4)
    confirmation = window.confirm(2, multiple=True, acked=False)
    assert _ids(confirmation.refused) == [1, 2]
    assert confirmation.confirmed == ()


def test_a_returned_message_is_refused_even_though_the_broker_acks_it() -> None:
    window = _window(3)
    window.returned(2)
    confirmation = window.confirm(3, multiple=True, acked=True)
    assert _ids(confirmation.confirmed) == [1, 3]
    assert _ids(confirmation.refused) == [2]


def test_a_return_is_forgotten_once_its_confirm_settled_it() -> None:
    window = _window(1)
    window.returned(1)
    window.confirm(1, multiple=False, acked=True)
    window.add(Sent(1, "next-lease"))
    assert _ids(window.confirm(2, multiple=False, acked=True).confirmed) == [1]


def test_a_confirm_for_an_already_settled_tag_settles_nothing() -> None:
    window = _window(2)
    window.confirm(2, multiple=True, acked=True)
    again = window.confirm(2, multiple=True, acked=True)
    assert again.confirmed == () and again.refused == ()


def test_abandoning_gives_back_every_unconfirmed_row_with_its_token() -> None:
    window = _window(2, token="a")
    window.add(Sent(3, "b"))
    window.confirm(1, multiple=False, acked=True)
    assert window.abandon() == (Sent(2, "a"), Sent(3, "b"))
    assert len(window) == 0

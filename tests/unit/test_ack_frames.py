"""`consumer.link.ack_frames`: a round's acks as one `multiple` ack and the rest, never covering a tag that
is not being acked."""

from __future__ import annotations

from outbox_bridge.consumer.link import ack_frames


def test_a_run_from_the_lowest_unsettled_tag_is_one_frame() -> None:
    assert ack_frames(set(range(1, 11)), [4, 1, 2, 3, 6, 7]) == (4, [6, 7])


def test_nothing_goes_in_a_range_while_the_lowest_unsettled_tag_waits() -> None:
    assert ack_frames({5, 8, 9, 10}, [9, 10]) == (0, [9, 10])


def test_the_range_stops_at_the_first_tag_still_running() -> None:
    assert ack_frames({5, 8, 9, 10}, [8, 5, 10]) == (8, [10])


def test_every_unsettled_tag_acked_is_one_frame() -> None:
    assert ack_frames({2, 3, 7}, [7, 3, 2]) == (7, [])


def test_a_tag_already_settled_is_not_acked_twice_within_the_range() -> None:
    # Acking a tag twice closes the channel; the range may pass over it, but it is not sent on its own.
    assert ack_frames({3, 4}, [2, 3, 4]) == (4, [])

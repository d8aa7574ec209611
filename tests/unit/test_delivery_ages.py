"""`consumer.link.DeliveryAges`: which of a channel's deliveries have been held longer than the hold, told
from a note of the highest tag every step, with no clock read per delivery."""

from __future__ import annotations

from outbox_bridge.consumer.link import NOTES_PER_HOLD, DeliveryAges


def test_no_delivery_is_old_before_a_hold_has_passed_since_the_first_note() -> None:
    ages = DeliveryAges(8.0)
    assert ages.note(100.0, 3) == 0
    assert ages.note(107.9, 5) == 0


def test_tags_noted_a_hold_ago_are_old_and_later_ones_are_not() -> None:
    ages = DeliveryAges(8.0)
    ages.note(100.0, 3)
    ages.note(101.0, 5)
    assert ages.note(108.0, 9) == 3
    assert ages.note(109.0, 9) == 5
    assert ages.note(117.0, 9) == 9


def test_a_note_that_adds_no_tag_keeps_the_older_note() -> None:
    # The highest tag held fell (its delivery was acked): tags up to 5 still arrived by the first note.
    ages = DeliveryAges(8.0)
    ages.note(100.0, 5)
    ages.note(104.0, 2)
    assert ages.note(108.0, 2) == 5


def test_the_next_note_is_a_step_after_the_last() -> None:
    ages = DeliveryAges(8.0)
    ages.note(100.0, 1)
    assert ages.next_note == 100.0 + 8.0 / NOTES_PER_HOLD


def test_a_new_channel_forgets_the_old_notes() -> None:
    ages = DeliveryAges(8.0)
    ages.note(100.0, 7)
    ages.clear()
    assert ages.next_note == 0.0
    assert ages.note(108.0, 1) == 0

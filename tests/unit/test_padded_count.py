"""The sizes of list an expanding `IN` is compiled for: exact up to 8, then four per doubling."""

from __future__ import annotations

from outbox_bridge.jobstore.db import padded_count


def test_small_counts_are_their_own_size() -> None:
    assert [padded_count(n) for n in range(9)] == list(range(9))


def test_larger_counts_round_up_to_a_quarter_of_their_power_of_two() -> None:
    assert [padded_count(n) for n in (9, 10, 11, 16, 17, 20, 21, 33, 257, 512)] == [
        10,
        10,
        12,
        16,
        20,
        20,
        24,
        40,
        320,
        512,
    ]


def test_at_most_a_fifth_of_a_filled_list_repeats_and_sizes_stay_few() -> None:
    assert all(padded_count(n) >= n and (padded_count(n) - n) * 5 <= padded_count(n) for n in range(1, 5000))
    assert len({padded_count(n) for n in range(1, 513)}) == 32

"""The instruments' label sets stay bounded: a job's kind and a delivery's outcome, never a job id, a
tenant or anything else that grows with the traffic."""

from __future__ import annotations

from outbox_bridge.telemetry import instruments

BOUNDED = {"kind", "outcome"}


def test_every_instrument_is_labelled_only_by_bounded_names() -> None:
    for role, members in instruments.BY_ROLE.items():
        for instrument in members:
            assert set(instrument._labelnames) <= BOUNDED, (role, instrument._name)


def test_deliveries_are_counted_under_the_named_outcomes_only() -> None:
    reported = {
        sample.labels["outcome"] for family in instruments.DELIVERIES.collect() for sample in family.samples
    }
    assert reported == set(instruments.DELIVERY_OUTCOMES)

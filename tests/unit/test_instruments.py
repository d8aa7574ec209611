"""The instruments' label sets stay bounded: a job's kind and queue (named in a kind's code) and a delivery's
or a job's outcome, never a job id, a tenant or anything else that grows with the traffic."""

from __future__ import annotations

from outbox_bridge.telemetry import instruments

BOUNDED = {"kind", "queue", "outcome"}


def test_every_instrument_is_labelled_only_by_bounded_names() -> None:
    for role, members in instruments.BY_ROLE.items():
        for instrument in members:
            assert set(instrument._labelnames) <= BOUNDED, (role, instrument._name)


def test_deliveries_are_counted_under_the_named_outcomes_only() -> None:
    reported = {
        sample.labels["outcome"] for family in instruments.DELIVERIES.collect() for sample in family.samples
    }
    assert reported == set(instruments.DELIVERY_OUTCOMES)


def test_a_job_is_counted_finished_only_under_a_terminal_state_and_retried_only_when_queued_again() -> None:
    def counts() -> dict[tuple[str, ...], float]:
        families = [*instruments.JOBS_FINISHED.collect(), *instruments.JOB_RETRIES.collect()]
        return {
            (sample.name, *sample.labels.values()): sample.value
            for family in families
            for sample in family.samples
            if sample.labels.get("kind") == "unit-test-kind"
        }

    before = counts()
    for state in (*instruments.FINISHED_OUTCOMES, "queued", "running", "snoozed"):
        instruments.job_moved("unit-test-kind", "reports", state)
    instruments.jobs_moved({("unit-test-kind", "reports", "dead"): 2})
    moved = {key: n - before.get(key, 0.0) for key, n in counts().items()}

    finished = "outbox_bridge_jobs_finished_total"
    assert moved == {
        **{(finished, "unit-test-kind", "reports", state): 1.0 for state in instruments.FINISHED_OUTCOMES},
        (finished, "unit-test-kind", "reports", "dead"): 3.0,
        ("outbox_bridge_job_retries_total", "unit-test-kind", "reports"): 1.0,
    }

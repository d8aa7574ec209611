"""Each driver's statements are written out, as its database receives them, in `jobstore/drivers/sql/`: the
files match the code (`python -m outbox_bridge.jobstore.drivers` writes them again after a change)."""

from __future__ import annotations

from pathlib import Path

import pytest

from outbox_bridge.jobstore import drivers
from outbox_bridge.jobstore.drivers import listing

SQL = Path(drivers.__file__).with_name("sql")


@pytest.mark.parametrize("name", sorted(drivers.DRIVERS))
def test_the_written_statements_are_the_ones_the_driver_sends(name: str) -> None:
    written = (SQL / f"{name}.sql").read_text()
    assert written == listing.rendered(drivers.named(name)), (
        f"jobstore/drivers/sql/{name}.sql is out of date: run `python -m outbox_bridge.jobstore.drivers`"
    )


def test_every_statement_of_the_path_every_job_takes_is_written_out() -> None:
    for name, expected in {
        "sqlite": {
            "INSERT_JOB",
            "INSERT_OUTBOX_ROW",
            "CLAIM",
            "INSERT_ATTEMPT",
            "COMPLETE_MANY",
            "MARK_PUBLISHED",
        },
        "postgresql": {"INSERT_JOBS", "CLAIM", "CLAIM_DUE", "COMPLETE_MANY", "DUE_AT_ONCE", "MARK_PUBLISHED"},
    }.items():
        assert expected <= set(listing.statements(drivers.named(name))), name

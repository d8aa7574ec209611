"""`outbox-bridge bench`'s webhook figures, measured small: the relay's sender drained every delivery written
beforehand to a real receiver on 127.0.0.1 (each one delivered, in one attempt) and says what one cost, a
matching endpoint makes a job's completion write more to the WAL, the report shows both, and no scratch
store is left behind."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from outbox_bridge.bench import report, webhooks
from outbox_bridge.core.settings import Settings

# The figures come from scratch SQLite stores of their own: once, whatever TEST_DATABASES says.
pytestmark = pytest.mark.databases("sqlite")


def test_the_senders_rate_and_a_deliverys_costs_are_measured_and_reported(
    tmp_path: Path, settings_factory: Callable[..., Settings]
) -> None:
    settings = settings_factory(webhook_senders=4, webhook_max_in_flight_per_endpoint=2)
    found = webhooks.measure(tmp_path, settings, 40)

    sending = found["sending"]
    assert sending["endpoints"] == 2 and sending["senders"] == 4
    assert sending["deliveries"] == sending["attempts"] == 40, "each one delivered, at the first attempt"
    assert sending["deliveries_per_second"] > 0 and sending["seconds"] > 0
    per_delivery = sending["per_delivery"]
    assert per_delivery["write_transactions"] >= 1, "the attempt's outcome is written back"
    assert per_delivery["read_transactions"] > 0 and per_delivery["statements"] > 0
    assert per_delivery["wal_bytes"] > 0 and per_delivery["cpu_ms"] > 0

    writes = found["job_writes"]
    complete = writes["complete_wal_bytes_per_job"]
    assert 0 < complete["no_endpoint"] < complete["one_endpoint"]
    assert writes["wal_bytes_added_per_job"] == complete["one_endpoint"] - complete["no_endpoint"] > 0
    assert list(tmp_path.glob("webhooks-*")) == []

    table = report.markdown([{"mode": "broker", "synchronous": "FULL", "phases": {"webhooks": found}}])
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in table.splitlines()}
    shown = [line for name, line in rows.items() if name.startswith("webhooks")]
    assert len(shown) == 3 and not any(line.endswith("| - |") for line in shown), shown

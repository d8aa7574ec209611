"""`python -m outbox_bridge.jobstore.drivers`: write each driver's statements, as its database receives
them, to `jobstore/drivers/sql/<driver>.sql` (`tests/unit/test_driver_statements.py` checks that they are
current)."""

from __future__ import annotations

from pathlib import Path

from outbox_bridge.jobstore.drivers import DRIVERS, named, rendered

SQL = Path(__file__).with_name("sql")

if __name__ == "__main__":
    SQL.mkdir(exist_ok=True)
    for name in DRIVERS:
        path = SQL / f"{name}.sql"
        path.write_text(rendered(named(name)))
        print(f"wrote {path}")

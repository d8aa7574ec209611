"""`python -m outbox_bridge.jobstore.drivers`: write each driver's named statements, as its database receives
them, to `jobstore/drivers/sql/<driver>.sql` (`tests/unit/test_driver_statements.py` checks that they are
current).

`python -m outbox_bridge.jobstore.drivers --record DATABASE_URL ...`: run one typical call of each store
operation on each database named (an empty one: its schema is created first) and write what each sent to
`jobstore/drivers/sql/<driver>-operations.sql` (`jobstore.drivers.recording`;
`tests/integration/test_store_operations_sql.py` checks that they are current)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, migrate
from outbox_bridge.jobstore.drivers import DRIVERS, listing, named, recording

SQL = Path(__file__).with_name("sql")


def _record(url: str) -> Path:
    settings = Settings(database_url=url)
    engine = db.make_engine(settings)
    try:
        migrate.init_schema(settings, engine)
        text = recording.rendered(engine.dialect.name, recording.record(engine))
    finally:
        engine.dispose()
    path = SQL / f"{engine.dialect.name}-operations.sql"
    path.write_text(text)
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m outbox_bridge.jobstore.drivers")
    parser.add_argument(
        "--record", nargs="+", metavar="DATABASE_URL", help="an empty database of each driver"
    )
    args = parser.parse_args()
    SQL.mkdir(exist_ok=True)
    if args.record:
        logging.disable(logging.CRITICAL)  # the recorded operations' job events
        for url in args.record:
            print(f"wrote {_record(url)}")
    else:
        for name in DRIVERS:
            path = SQL / f"{name}.sql"
            path.write_text(listing.rendered(named(name)))
            print(f"wrote {path}")

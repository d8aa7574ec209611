"""Each driver's named statements, as its database receives them: the listing in
`jobstore/drivers/sql/<driver>.sql` (`python -m outbox_bridge.jobstore.drivers` writes it;
`tests/unit/test_driver_statements.py` checks that it is current)."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any

from sqlalchemy import ClauseElement

from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.drivers import Driver


def statements(driver: Driver) -> dict[str, str]:
    """The driver's named statements (the upper-case names of its module, and `shared_statements`), by
    name, as its database receives them."""
    named: dict[str, str] = {}
    for name, value in [*vars(sys.modules[type(driver).__module__]).items(), *driver.shared_statements()]:
        if not name.isupper():
            continue
        if isinstance(value, ClauseElement):
            value = db.Direct.of(value, dialect=driver.name)
        if isinstance(value, db.Direct):
            named[name] = _with_literals(value.sql, value.defaults)
    return named


def _with_literals(sql: str, defaults: Mapping[str, Any]) -> str:
    """`sql` with the values of its literals (`db.Direct.defaults`) in place of their placeholders."""
    for name, value in defaults.items():
        if value is None:
            continue
        literal = repr(value).lower() if isinstance(value, bool) else repr(value)
        sql = re.sub(rf"%\({name}\)s|:{name}\b", literal.replace("\\", "\\\\"), sql)
    return sql


def rendered(driver: Driver) -> str:
    """`statements(driver)` as one SQL file, a statement per name."""
    head = (
        f"-- The statements the {driver.name} driver sends, as the database receives them. Written\n"
        "-- by `python -m outbox_bridge.jobstore.drivers` from the code; do not edit.\n"
        "-- `(__[POSTCOMPILE_x])` is a list of values, sent with one placeholder per value.\n"
    )
    body = "".join(f"\n-- name: {name}\n{sql.strip()};\n" for name, sql in sorted(statements(driver).items()))
    return head + "\n".join(line.rstrip() for line in body.split("\n"))

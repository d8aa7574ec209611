"""Whether the store can be worked on: reachable, and at the schema revision this code needs."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from outbox_bridge.jobstore import db, migrate

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoreNotReady:
    """Why the store cannot be worked on: not reachable, or reachable but not at the code's revision."""

    reachable: bool
    reason: str


def store_not_ready(engine: Engine) -> StoreNotReady | None:
    """None when the store answers at the code's schema revision (`migrate.check_current`); else why not.
    Writes nothing, and creates no SQLite file."""
    try:
        migrate.check_current(engine)
    except migrate.SchemaNotCurrent as exc:
        return StoreNotReady(reachable=True, reason=str(exc))
    except (db.StoreUnavailable, SQLAlchemyError) as exc:
        return StoreNotReady(reachable=False, reason=first_line(exc))
    return None


def store_ready(engine: Engine) -> bool:
    """True when the store answers at the code's schema revision; otherwise logs what is wrong and what to
    run about it."""
    problem = store_not_ready(engine)
    if problem is None:
        return True
    if problem.reachable:
        log.error("store not ready: %s", problem.reason)
    else:
        log.error("store not reachable: %s", problem.reason)
    return False


def first_line(exc: BaseException) -> str:
    """What went wrong, in one line: a database driver's own message, without SQLAlchemy's statement and
    background link."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__

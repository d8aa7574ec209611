"""The SQLite file a store engine uses is the one its URL names now.

SQLite creates a missing file on connect, and a pooled connection keeps using the file it opened after that
file was removed or replaced (`rm -rf` of its directory, a volume remounted over it, a restore that moved a
backup into place): its writes then go where no one will read them. A guarded engine opens only a file that
exists (`mode=rw`; `migrate.init_schema` alone creates one), remembers the device and inode of the file each
connection opened, and compares them with the path's at every checkout, where a connection whose file is
no longer named is closed and opened again (or, with nothing there, fails). One `stat` per checkout, and one
more after each write transaction's commit (`still_named`), which catches a removal during the transaction.
"""

from __future__ import annotations

import os
import sqlite3
import weakref
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import DisconnectionError

FileIdentity = tuple[int, int]
_OPENED = "store_file"  # on a connection's pool record: the identity of the file it opened

# The file each guarded engine must be using.
_files: weakref.WeakKeyDictionary[Engine, Path] = weakref.WeakKeyDictionary()


def identity(path: Path) -> FileIdentity | None:
    """The device and inode of the file `path` names now; None when there is none (or it cannot be seen)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def guard(engine: Engine, database: Path) -> None:
    """Make every connection of the SQLite `engine` one to the file `database` names now: opened only if
    it exists, and opened again at checkout when the path no longer names the file it opened. A missing file
    is a `sqlite3.OperationalError` naming the path, which the store reports as `StoreUnavailable`."""
    path = database.absolute()
    _files[engine] = path
    uri = f"{path.as_uri()}?mode=rw"

    @event.listens_for(engine, "do_connect")
    def _open_existing(dialect: Any, record: Any, _cargs: Any, cparams: dict[str, Any]) -> Any:
        found = identity(path)
        if found is None:
            raise sqlite3.OperationalError(
                f"no store at {path} (removed, or never created: `outbox-bridge db init` creates one)"
            )
        dbapi_connection = dialect.connect(uri, **{**cparams, "uri": True})
        if identity(path) != found:
            dbapi_connection.close()
            raise sqlite3.OperationalError(f"the store at {path} was replaced while it was being opened")
        record.info[_OPENED] = found
        return dbapi_connection

    @event.listens_for(engine, "checkout")
    def _reopen_if_replaced(_dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if identity(path) != record.info.get(_OPENED):
            raise DisconnectionError(f"{path} is no longer the file this connection opened")


def still_named(engine: Engine, conn: Connection) -> bool:
    """Whether the file `conn` opened is still the one `engine`'s path names (always, unguarded)."""
    path = _files.get(engine)
    return path is None or identity(path) == conn.info.get(_OPENED)

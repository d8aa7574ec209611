"""Write turns moved to `jobstore.turns`: every write transaction of `db.transact` now takes one, so
baseline workers no longer take turns of their own. The name stays importable from here."""

from jobstore.turns import WriteTurn

__all__ = ["WriteTurn"]

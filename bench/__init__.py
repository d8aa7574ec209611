"""`outbox-bridge bench`: the broker path and the SQLite-only baseline measured side by side, in one run."""

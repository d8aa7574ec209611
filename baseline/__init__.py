"""The SQLite-only baseline: worker processes that poll the jobs table with `BEGIN IMMEDIATE`, run what they
claim with the same runner as the broker consumers, and sweep expired leases themselves."""

"""The SQLite-only baseline: worker processes that poll the jobs table with `BEGIN IMMEDIATE`, run what they
claim with the same worker runtime as the broker consumers (`worker/`), and sweep expired leases themselves.
"""
